//! Sign-ins shared by the replicas of one deployment (`[state] redis` and
//! `TOOLSEARCH_TOKEN_KEY`): each server's tokens in one Redis key, sealed with AES-256-GCM under
//! a key derived from the variable, so that what Redis holds (and what a Redis dump or a
//! replica of it shows) reads as nothing without the variable. The key's name is bound into
//! the seal: a value copied under another server's key does not open.

use std::time::Duration;

use base64::Engine as _;
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use super::SignInError;
use crate::config::StateConfig;

/// The variable that holds the key every replica seals and opens sign-ins with.
pub const TOKEN_KEY_ENV: &str = "TOOLSEARCH_TOKEN_KEY";

/// The fewest characters `TOOLSEARCH_TOKEN_KEY` may have: a random key of that length (as
/// `openssl rand -base64 32` prints) holds far more than the 128 bits of AES's margin.
pub const MIN_KEY_CHARS: usize = 32;

/// How long a replica renewing a sign-in holds the others off; longer than a token request.
const RENEWAL_HOLD: Duration = Duration::from_secs(20);

/// Deletes the renewal mark only when it is still this replica's.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// The sealing key, from the variable's text.
pub(super) struct Sealer {
    key: LessSafeKey,
}

impl Sealer {
    /// The key derived (HKDF-SHA256) from `secret`, which must have [`MIN_KEY_CHARS`].
    pub(super) fn new(secret: &str) -> Result<Self, SignInError> {
        let chars = secret.chars().count();
        if chars < MIN_KEY_CHARS {
            return Err(SignInError::WeakKey { chars });
        }
        let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"toolsearch sign-ins");
        let prk = salt.extract(secret.as_bytes());
        let okm = prk
            .expand(&[b"aes-256-gcm v1"], &AES_256_GCM)
            .map_err(|_| SignInError::Seal("the key could not be derived".into()))?;
        Ok(Self {
            key: LessSafeKey::new(UnboundKey::from(okm)),
        })
    }

    /// `v1.` and the base64 of a random nonce, the ciphertext and its tag; `bound` (the Redis
    /// key) is authenticated with it.
    pub(super) fn seal(&self, bound: &str, plain: &[u8]) -> Result<String, SignInError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SignInError::Seal("no random numbers for the nonce".into()))?;
        let mut sealed = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(bound.as_bytes()),
                &mut sealed,
            )
            .map_err(|_| SignInError::Seal("sealing failed".into()))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(format!(
            "v1.{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(out)
        ))
    }

    /// What [`seal`](Self::seal) sealed under `bound`; an error when the text was sealed with
    /// another key, under another name, or changed.
    pub(super) fn open(&self, bound: &str, text: &str) -> Result<Vec<u8>, SignInError> {
        let unreadable = || SignInError::Unopenable {
            place: bound.to_string(),
        };
        let bytes = text
            .strip_prefix("v1.")
            .and_then(|b64| {
                base64::engine::general_purpose::STANDARD_NO_PAD
                    .decode(b64)
                    .ok()
            })
            .filter(|bytes| bytes.len() >= NONCE_LEN)
            .ok_or_else(unreadable)?;
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| unreadable())?;
        let mut sealed = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(bound.as_bytes()), &mut sealed)
            .map_err(|_| unreadable())?;
        Ok(plain.to_vec())
    }
}

/// The deployment's sign-ins in Redis.
pub(super) struct SharedTokens {
    /// The Redis URL without its password, for messages.
    shown: String,
    prefix: String,
    connection: ConnectionManager,
    timeout: Duration,
    sealer: Sealer,
    release: Script,
}

impl std::fmt::Debug for SharedTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTokens")
            .field("redis", &self.shown)
            .finish_non_exhaustive()
    }
}

/// A renewal this replica holds; [`SharedTokens::release`] ends it (else it lapses).
pub(super) struct Renewal {
    key: String,
    mark: String,
}

impl SharedTokens {
    /// Sign-ins in the Redis of `state` (connected lazily), sealed with `secret`.
    pub(super) fn connect(
        url: &str,
        state: &StateConfig,
        secret: &str,
    ) -> Result<Self, SignInError> {
        let sealer = Sealer::new(secret)?;
        let shown = crate::shared::redacted(url);
        let fail = |e: redis::RedisError| SignInError::Shared {
            redis: shown.clone(),
            reason: e.to_string(),
        };
        let client = redis::Client::open(url).map_err(fail)?;
        let timeout = Duration::from_millis(state.timeout_ms);
        let connection = crate::shared::lazy_connection(client, timeout).map_err(fail)?;
        Ok(Self {
            shown,
            prefix: state.prefix.clone(),
            connection,
            timeout,
            sealer,
            release: Script::new(RELEASE),
        })
    }

    pub(super) fn shown(&self) -> &str {
        &self.shown
    }

    fn key(&self, stem: &str) -> String {
        format!("{}:signin:{stem}", self.prefix)
    }

    async fn run<T>(
        &self,
        what: &str,
        operation: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, SignInError> {
        let failed = |reason: String| SignInError::Shared {
            redis: self.shown.clone(),
            reason: format!("{what}: {reason}"),
        };
        match tokio::time::timeout(self.timeout, operation).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(failed(e.to_string())),
            Err(_) => Err(failed(format!(
                "no answer within {} ms (`state.timeoutMs`)",
                self.timeout.as_millis()
            ))),
        }
    }

    /// The sealed text kept for `stem`, as Redis holds it (for noticing a change).
    pub(super) async fn sealed(&self, stem: &str) -> Result<Option<String>, SignInError> {
        let mut connection = self.connection.clone();
        self.run("read a sign-in", connection.get(self.key(stem)))
            .await
    }

    /// What was kept for `stem`, opened.
    pub(super) async fn get(&self, stem: &str) -> Result<Option<Vec<u8>>, SignInError> {
        match self.sealed(stem).await? {
            None => Ok(None),
            Some(text) => self.sealer.open(&self.key(stem), &text).map(Some),
        }
    }

    pub(super) async fn put(&self, stem: &str, plain: &[u8]) -> Result<(), SignInError> {
        let key = self.key(stem);
        let sealed = self.sealer.seal(&key, plain)?;
        let mut connection = self.connection.clone();
        self.run("keep a sign-in", connection.set::<_, _, ()>(key, sealed))
            .await
    }

    /// Forgets `stem`; whether anything was kept.
    pub(super) async fn delete(&self, stem: &str) -> Result<bool, SignInError> {
        let mut connection = self.connection.clone();
        let removed: i64 = self
            .run("forget a sign-in", connection.del(self.key(stem)))
            .await?;
        Ok(removed > 0)
    }

    /// Marks `stem` as being renewed by this replica, waiting (up to the hold) while another
    /// replica renews it: a refresh token may be good for one use only, so two replicas
    /// renewing at once would leave one with a refused token. `None` when the wait ran out (the
    /// other replica's mark lapses with its hold, so it did not finish).
    pub(super) async fn begin_renewal(&self, stem: &str) -> Result<Option<Renewal>, SignInError> {
        let key = format!("{}:signin-renewal:{stem}", self.prefix);
        let mut mark = [0u8; 16];
        SystemRandom::new()
            .fill(&mut mark)
            .map_err(|_| SignInError::Seal("no random numbers for the renewal mark".into()))?;
        let mark: String = mark.iter().map(|b| format!("{b:02x}")).collect();
        let started = tokio::time::Instant::now();
        while started.elapsed() < RENEWAL_HOLD {
            let mut connection = self.connection.clone();
            let set: Option<String> = self
                .run(
                    "mark a renewal",
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(&mark)
                        .arg("NX")
                        .arg("PX")
                        .arg(RENEWAL_HOLD.as_millis() as u64)
                        .query_async(&mut connection),
                )
                .await?;
            if set.is_some() {
                return Ok(Some(Renewal { key, mark }));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(None)
    }

    pub(super) async fn release(&self, renewal: Renewal) {
        let mut connection = self.connection.clone();
        let mut invocation = self.release.prepare_invoke();
        invocation.key(&renewal.key).arg(&renewal.mark);
        // A mark that is not released lapses with its hold.
        if let Err(e) = self
            .run::<i64>("end a renewal", invocation.invoke_async(&mut connection))
            .await
        {
            tracing::debug!(target: "upstream", error = %e, "the renewal mark stays until it lapses");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_sealed_sign_in_opens_only_with_its_key_and_under_its_name() {
        let sealer = Sealer::new(KEY).unwrap();
        let sealed = sealer
            .seal("ts:signin:linear-1", br#"{"access_token":"a-secret"}"#)
            .unwrap();
        assert!(!sealed.contains("a-secret"), "{sealed}");
        assert_eq!(
            sealer.open("ts:signin:linear-1", &sealed).unwrap(),
            br#"{"access_token":"a-secret"}"#
        );
        // Two seals of one text differ (a fresh nonce each).
        assert_ne!(sealed, sealer.seal("ts:signin:linear-1", b"x").unwrap());
        // Another name, another key, a changed text: none opens.
        assert!(sealer.open("ts:signin:github-2", &sealed).is_err());
        let other = Sealer::new("another key of at least thirty-two chars").unwrap();
        assert!(other.open("ts:signin:linear-1", &sealed).is_err());
        let mut changed = sealed.clone().into_bytes();
        let last = changed.len() - 2;
        changed[last] = if changed[last] == b'A' { b'B' } else { b'A' };
        let changed = String::from_utf8(changed).unwrap();
        assert!(sealer.open("ts:signin:linear-1", &changed).is_err());
        assert!(sealer.open("ts:signin:linear-1", "plain text").is_err());
    }

    #[test]
    fn a_short_key_is_refused_with_how_to_make_one() {
        let error = Sealer::new("short").err().unwrap().to_string();
        assert!(error.contains("TOOLSEARCH_TOKEN_KEY"), "{error}");
        assert!(error.contains("openssl rand"), "{error}");
    }
}
