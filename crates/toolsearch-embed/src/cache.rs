//! Tool vectors on disk, so a restart embeds only the tools whose text changed.
//!
//! One file per model, named by a hash of the model's identity; entries keyed by the sha256 of
//! the embedded text. Format (little-endian):
//!
//! ```text
//! magic "TSVECTOR" | version u32 | dims u32 | model id length u32 | model id (UTF-8)
//! | entry count u64 | entries: (sha256 of text [32 bytes], dims × f32)*
//! | sha256 of everything before [32 bytes]
//! ```
//!
//! A file that is unreadable, truncated, of another version, of another model or dimension, or
//! whose checksum does not match is not an error: it is logged as a warning and rebuilt.

use crate::error::ModelError;
use crate::hash::{hex, sha256};
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use toolsearch_core::embed::{embed_checked, EmbedError, Embedder};

const MAGIC: &[u8; 8] = b"TSVECTOR";
const VERSION: u32 = 1;
/// Model identities are short; a longer one means the header is garbage.
const MAX_ID_LEN: usize = 4096;
/// Texts embedded per model call when filling the cache.
const EMBED_CHUNK: usize = 256;

type Key = [u8; 32];

/// What opening the cache found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOpened {
    /// No file yet: every text will be embedded.
    Missing,
    /// The file was read: `entries` vectors are reused.
    Loaded { entries: usize },
    /// The file could not be used (the reason says why) and starts again empty.
    Rebuilt { reason: String },
}

/// How many texts were found in the cache and how many were embedded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmbedStats {
    pub cached: usize,
    pub embedded: usize,
}

/// The vectors of one model, by text.
#[derive(Debug)]
pub struct VectorCache {
    path: PathBuf,
    model_id: String,
    dims: usize,
    entries: HashMap<Key, Box<[f32]>>,
    dirty: bool,
}

impl VectorCache {
    /// The cache file for `model_id` under the user's cache directory:
    /// `<cache root>/vectors/<hash of the model id>.bin` (None without a cache directory).
    pub fn default_path(model_id: &str) -> Option<PathBuf> {
        let env = |key: &str| -> Option<OsString> { std::env::var_os(key) };
        Some(Self::path_in(&crate::cache_root(&env)?, model_id))
    }

    /// The cache file for `model_id` in the folder `root`.
    pub fn path_in(root: &Path, model_id: &str) -> PathBuf {
        root.join("vectors")
            .join(format!("{}.bin", &hex(&sha256(model_id.as_bytes()))[..32]))
    }

    /// Opens the cache at `path` for vectors of `model_id` with `dims` dimensions. Never fails: a
    /// file that cannot be used is reported (in [`CacheOpened`] and as a warning) and rebuilt.
    pub fn open(path: impl Into<PathBuf>, model_id: &str, dims: usize) -> (Self, CacheOpened) {
        let path = path.into();
        let mut cache = Self {
            path,
            model_id: model_id.to_string(),
            dims,
            entries: HashMap::new(),
            dirty: false,
        };
        let opened = match fs::read(&cache.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => CacheOpened::Missing,
            Err(e) => CacheOpened::Rebuilt {
                reason: format!("cannot read it: {e}"),
            },
            Ok(bytes) => match cache.decode(&bytes) {
                Ok(entries) => {
                    cache.entries = entries;
                    CacheOpened::Loaded {
                        entries: cache.entries.len(),
                    }
                }
                Err(reason) => CacheOpened::Rebuilt { reason },
            },
        };
        if let CacheOpened::Rebuilt { reason } = &opened {
            tracing::warn!(
                path = %cache.path.display(),
                "the vector cache cannot be used ({reason}); it will be rebuilt, embedding every tool again"
            );
            // Written back on the next save even if nothing new is embedded.
            cache.dirty = true;
        }
        (cache, opened)
    }

    fn decode(&self, bytes: &[u8]) -> Result<HashMap<Key, Box<[f32]>>, String> {
        if !bytes.starts_with(MAGIC) {
            return Err("not a toolsearch vector cache".into());
        }
        let mut reader = Reader {
            bytes,
            at: MAGIC.len(),
        };
        let version = reader.u32()?;
        if version != VERSION {
            return Err(format!("format version {version}, expected {VERSION}"));
        }
        // The checksum first, so that a damaged header is reported as damage.
        let Some(body_len) = bytes.len().checked_sub(32) else {
            return Err("truncated".into());
        };
        if body_len < reader.at || sha256(&bytes[..body_len]) != bytes[body_len..] {
            return Err("checksum mismatch: the file is damaged".into());
        }
        let dims = reader.u32()? as usize;
        let id_len = reader.u32()? as usize;
        if id_len > MAX_ID_LEN {
            return Err("damaged header".into());
        }
        let id = String::from_utf8_lossy(reader.take(id_len)?).into_owned();
        if id != self.model_id {
            return Err(format!(
                "it holds vectors of model `{id}`, not `{}`",
                self.model_id
            ));
        }
        if dims != self.dims {
            return Err(format!(
                "it holds {dims}-dimension vectors, not {}",
                self.dims
            ));
        }
        let count = reader.u64()?;
        let entry_len = 32 + dims * 4;
        let expected = (count as u128) * (entry_len as u128) + reader.at as u128 + 32;
        if expected != bytes.len() as u128 {
            return Err(format!("{count} entries do not fit the file's length"));
        }
        let mut entries = HashMap::with_capacity(count as usize);
        for _ in 0..count {
            let mut key = [0u8; 32];
            key.copy_from_slice(reader.take(32)?);
            let vector: Box<[f32]> = reader
                .take(dims * 4)?
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            if vector.iter().any(|x| !x.is_finite()) {
                return Err("a vector holds a value that is not a number".into());
            }
            entries.insert(key, vector);
        }
        Ok(entries)
    }

    fn encode(&self) -> Vec<u8> {
        let entry_len = 32 + self.dims * 4;
        let mut out = Vec::with_capacity(
            MAGIC.len() + 20 + self.model_id.len() + self.entries.len() * entry_len + 32,
        );
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.dims as u32).to_le_bytes());
        out.extend_from_slice(&(self.model_id.len() as u32).to_le_bytes());
        out.extend_from_slice(self.model_id.as_bytes());
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        // Sorted by key, so the same entries always make the same file.
        let mut keys: Vec<&Key> = self.entries.keys().collect();
        keys.sort();
        for key in keys {
            out.extend_from_slice(key);
            for x in self.entries[key].iter() {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        let checksum = sha256(&out);
        out.extend_from_slice(&checksum);
        out
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn key(text: &str) -> Key {
        sha256(text.as_bytes())
    }

    /// The cached vector of `text`.
    pub fn get(&self, text: &str) -> Option<&[f32]> {
        self.entries.get(&Self::key(text)).map(|v| &**v)
    }

    /// Stores the vector of `text`; a vector of the wrong length is an error.
    pub fn insert(&mut self, text: &str, vector: &[f32]) -> Result<(), EmbedError> {
        if vector.len() != self.dims {
            return Err(EmbedError::Dimensions {
                expected: self.dims,
                got: vector.len(),
            });
        }
        self.entries.insert(Self::key(text), vector.into());
        self.dirty = true;
        Ok(())
    }

    /// Drops every entry whose text is not in `texts` (tools that are gone), so the file does not
    /// grow forever. Call it with the whole catalog's texts.
    pub fn retain_texts(&mut self, texts: &[&str]) {
        let keep: HashSet<Key> = texts.iter().map(|t| Self::key(t)).collect();
        let before = self.entries.len();
        self.entries.retain(|key, _| keep.contains(key));
        if self.entries.len() != before {
            self.dirty = true;
        }
    }

    /// The vectors of `texts`, in order: cached ones reused, the others embedded (in chunks) and
    /// added to the cache. Fails only if the embedder does; the cache is not saved here.
    pub fn embed_all(
        &mut self,
        embedder: &dyn Embedder,
        texts: &[&str],
    ) -> Result<(Vec<Vec<f32>>, EmbedStats), EmbedError> {
        if embedder.model_id() != self.model_id || embedder.dimensions() != self.dims {
            return Err(EmbedError::model(
                embedder.model_id(),
                format!(
                    "the vector cache holds vectors of `{}` ({} dimensions); open the cache for this model",
                    self.model_id, self.dims
                ),
            ));
        }
        let mut out: Vec<Option<Vec<f32>>> = texts
            .iter()
            .map(|t| self.get(t).map(<[f32]>::to_vec))
            .collect();
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| out[i].is_none()).collect();
        let stats = EmbedStats {
            cached: texts.len() - missing.len(),
            embedded: missing.len(),
        };
        for chunk in missing.chunks(EMBED_CHUNK) {
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i]).collect();
            let vectors = embed_checked(embedder, &batch)?;
            for (&i, vector) in chunk.iter().zip(vectors) {
                self.insert(texts[i], &vector)?;
                out[i] = Some(vector);
            }
        }
        Ok((
            out.into_iter().map(Option::unwrap_or_default).collect(),
            stats,
        ))
    }

    /// Writes the cache if anything changed: to a temporary file beside it, then renamed over it,
    /// so a reader never sees half a file. A failure leaves the old file as it was.
    pub fn save(&mut self) -> Result<(), ModelError> {
        if !self.dirty {
            return Ok(());
        }
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(|e| ModelError::io(parent, e))?;
        }
        let temp = self
            .path
            .with_extension(format!("tmp-{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut file = fs::File::create(&temp)?;
            file.write_all(&self.encode())?;
            file.sync_all()?;
            fs::rename(&temp, &self.path)
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&temp);
            return Err(ModelError::io(&self.path, e));
        }
        self.dirty = false;
        Ok(())
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or("truncated")?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use toolsearch_core::embed::HashEmbedder;

    /// The stand-in model under a chosen identity, counting the texts it embeds.
    struct Model {
        inner: HashEmbedder,
        id: String,
        embedded: AtomicUsize,
    }

    impl Model {
        fn new(id: &str) -> Self {
            Self {
                inner: HashEmbedder::new(16),
                id: id.to_string(),
                embedded: AtomicUsize::new(0),
            }
        }
    }

    impl Embedder for Model {
        fn model_id(&self) -> &str {
            &self.id
        }
        fn dimensions(&self) -> usize {
            self.inner.dimensions()
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.embedded.fetch_add(texts.len(), Ordering::SeqCst);
            self.inner.embed(texts)
        }
    }

    const TEXTS: [&str; 3] = [
        "send email: Send an email to a recipient.",
        "get weather: Current weather for a city.",
        "create invoice: Create an invoice.",
    ];

    fn filled(path: &Path, model: &Model) -> Vec<Vec<f32>> {
        let (mut cache, _) = VectorCache::open(path, model.model_id(), model.dimensions());
        let (vectors, stats) = cache.embed_all(model, &TEXTS).unwrap();
        assert_eq!(stats.embedded, 3);
        cache.save().unwrap();
        vectors
    }

    #[test]
    fn round_trip_reuses_every_vector() {
        let dir = tempfile::tempdir().unwrap();
        let path = VectorCache::path_in(dir.path(), "model-a");
        let model = Model::new("model-a");
        let (cache, opened) = VectorCache::open(&path, "model-a", 16);
        assert_eq!(opened, CacheOpened::Missing);
        assert!(cache.is_empty());
        let first = filled(&path, &model);

        let again = Model::new("model-a");
        let (mut cache, opened) = VectorCache::open(&path, "model-a", 16);
        assert_eq!(opened, CacheOpened::Loaded { entries: 3 });
        let (vectors, stats) = cache.embed_all(&again, &TEXTS).unwrap();
        assert_eq!(
            stats,
            EmbedStats {
                cached: 3,
                embedded: 0
            }
        );
        assert_eq!(again.embedded.load(Ordering::SeqCst), 0);
        assert_eq!(vectors, first);
        // Nothing changed: saving again writes nothing (and succeeds).
        cache.save().unwrap();
    }

    #[test]
    fn a_changed_text_is_the_only_one_embedded_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = VectorCache::path_in(dir.path(), "model-a");
        filled(&path, &Model::new("model-a"));
        let model = Model::new("model-a");
        let (mut cache, _) = VectorCache::open(&path, "model-a", 16);
        let changed = [
            TEXTS[0],
            "get weather: Weather forecast for a city.",
            TEXTS[2],
        ];
        let (vectors, stats) = cache.embed_all(&model, &changed).unwrap();
        assert_eq!(stats.embedded, 1);
        assert_eq!(stats.cached, 2);
        assert_eq!(vectors[1], model.inner.vector(changed[1]));
        // The old text is pruned once the catalog no longer has it.
        assert_eq!(cache.len(), 4);
        cache.retain_texts(&changed);
        assert_eq!(cache.len(), 3);
        assert!(cache.get(TEXTS[1]).is_none());
        cache.save().unwrap();
        let (cache, opened) = VectorCache::open(&path, "model-a", 16);
        assert_eq!(opened, CacheOpened::Loaded { entries: 3 });
        assert!(cache.get(changed[1]).is_some());
    }

    #[test]
    fn another_model_gets_another_file_and_never_reads_a_foreign_one() {
        let dir = tempfile::tempdir().unwrap();
        assert_ne!(
            VectorCache::path_in(dir.path(), "model-a"),
            VectorCache::path_in(dir.path(), "model-b")
        );
        let path = VectorCache::path_in(dir.path(), "model-a");
        filled(&path, &Model::new("model-a"));
        // Model b pointed at model a's file (copied, or a hash collision): rebuilt, not trusted.
        let model_b = Model::new("model-b");
        let (mut cache, opened) = VectorCache::open(&path, "model-b", 16);
        match &opened {
            CacheOpened::Rebuilt { reason } => assert!(reason.contains("model-a"), "{reason}"),
            other => panic!("expected a rebuild, got {other:?}"),
        }
        let (_, stats) = cache.embed_all(&model_b, &TEXTS).unwrap();
        assert_eq!(stats.embedded, 3);
        // Same identity, other dimensions: also rebuilt.
        let (_, opened) = VectorCache::open(&path, "model-a", 32);
        assert!(matches!(opened, CacheOpened::Rebuilt { .. }));
    }

    #[test]
    fn embedding_with_a_model_the_cache_was_not_opened_for_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (mut cache, _) = VectorCache::open(dir.path().join("c.bin"), "model-a", 16);
        let err = cache.embed_all(&Model::new("model-b"), &TEXTS).unwrap_err();
        assert!(err.to_string().contains("model-a"), "{err}");
        assert!(cache.insert("x", &[1.0; 3]).is_err());
    }

    #[test]
    fn a_damaged_file_is_rebuilt_never_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        let path = VectorCache::path_in(dir.path(), "model-a");
        filled(&path, &Model::new("model-a"));
        let good = fs::read(&path).unwrap();

        let mut flipped = good.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0x40;
        let mut wrong_version = good.clone();
        wrong_version[8] = 99;
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("flipped bit", flipped, "checksum"),
            ("truncated", good[..good.len() - 7].to_vec(), "checksum"),
            ("empty", Vec::new(), "not a toolsearch vector cache"),
            (
                "garbage",
                b"{\"not\": \"a cache\"}".to_vec(),
                "not a toolsearch",
            ),
            ("other version", wrong_version, "version 99"),
        ];
        for (what, bytes, expected) in cases {
            fs::write(&path, &bytes).unwrap();
            let model = Model::new("model-a");
            let (mut cache, opened) = VectorCache::open(&path, "model-a", 16);
            match &opened {
                CacheOpened::Rebuilt { reason } => {
                    assert!(reason.contains(expected), "{what}: {reason}")
                }
                other => panic!("{what}: expected a rebuild, got {other:?}"),
            }
            let (_, stats) = cache.embed_all(&model, &TEXTS).unwrap();
            assert_eq!(stats.embedded, 3, "{what}");
            cache.save().unwrap();
            let (_, opened) = VectorCache::open(&path, "model-a", 16);
            assert_eq!(opened, CacheOpened::Loaded { entries: 3 }, "{what}");
        }
    }

    #[test]
    fn an_unusable_file_is_rewritten_even_when_nothing_new_is_embedded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.bin");
        fs::write(&path, b"junk").unwrap();
        let (mut cache, _) = VectorCache::open(&path, "model-a", 16);
        cache.save().unwrap();
        let (_, opened) = VectorCache::open(&path, "model-a", 16);
        assert_eq!(opened, CacheOpened::Loaded { entries: 0 });
    }

    #[test]
    fn save_is_atomic_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/dir/cache.bin");
        filled(&path, &Model::new("model-a"));
        let names: Vec<String> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["cache.bin".to_string()]);
        // The same entries always make the same bytes.
        let first = fs::read(&path).unwrap();
        let (mut cache, _) = VectorCache::open(&path, "model-a", 16);
        cache.dirty = true;
        cache.save().unwrap();
        assert_eq!(fs::read(&path).unwrap(), first);
    }

    #[test]
    fn a_save_that_cannot_write_is_an_error_that_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        fs::write(&blocker, b"x").unwrap();
        // The cache's folder would have to be inside a regular file.
        let (mut cache, _) = VectorCache::open(blocker.join("cache.bin"), "model-a", 16);
        cache.insert("t", &[0.5; 16]).unwrap();
        let err = cache.save().unwrap_err();
        assert!(err.to_string().contains("file"), "{err}");
    }
}
