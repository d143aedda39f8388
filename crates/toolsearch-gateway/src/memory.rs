//! Giving memory back once sessions end. A session's buffers (rmcp's channels and tasks, about
//! 80 KB) are freed when it ends, but glibc's allocator keeps freed memory inside its heaps: after
//! 3,000 sessions ended the gateway still held about 250 MB more than at start, and more after
//! each round of sessions (docs/BENCHMARKS.md, Many sessions). `malloc_trim(0)` hands free pages
//! back to the system; it runs on the blocking pool, at most one at a time, a moment after many
//! sessions ended, so that one trim covers a whole wave of them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Sessions ended since the last trim before another is worth its cost.
const ENDED_BEFORE_TRIM: usize = 64;
/// Wait after the trigger, so that the rest of a wave of ended sessions is freed first.
const TRIM_DELAY: Duration = Duration::from_secs(1);

static ENDED: AtomicUsize = AtomicUsize::new(0);
static PENDING: AtomicBool = AtomicBool::new(false);

/// Called once per ended session; trims the heap a moment after enough of them ended.
pub(crate) fn session_ended() {
    if ENDED.fetch_add(1, Ordering::Relaxed) + 1 < ENDED_BEFORE_TRIM {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if PENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    runtime.spawn(async {
        tokio::time::sleep(TRIM_DELAY).await;
        ENDED.store(0, Ordering::Relaxed);
        let trimmed = tokio::task::spawn_blocking(release_freed_memory).await;
        PENDING.store(false, Ordering::Release);
        if let Err(e) = trimmed {
            tracing::debug!(error = %e, "returning freed memory did not finish");
        }
    });
}

/// Gives back a map's room once most of it is empty: a map keeps the capacity of its largest
/// size, which after a wave of sessions is most of what they cost.
pub(crate) fn shrink_when_sparse<K: Eq + std::hash::Hash, V, S: std::hash::BuildHasher>(
    map: &mut std::collections::HashMap<K, V, S>,
) {
    if map.capacity() > 1024 && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

/// Hands the allocator's free pages back to the system (glibc keeps freed memory in its heaps);
/// a no-op where the allocator is not glibc's. Also what `bench search` calls before it counts
/// the tools, so that what making its workload freed is not counted.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_freed_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists under its locks.
    #[allow(unsafe_code)]
    let released = unsafe { libc::malloc_trim(0) };
    tracing::debug!(
        released = released != 0,
        "returned freed memory to the system"
    );
}

/// See the glibc version: there is nothing to hand back here.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_freed_memory() {}
