//! A BERT-style sentence model (all-MiniLM-L6-v2 by default) run in process with candle: WordPiece
//! tokens (no padding, at most [`MAX_TOKENS`]), the encoder, mean pooling over the attention mask,
//! L2 normalisation.

use crate::encoder::{model_root, root_prefix, Config, Encoder};
use crate::error::ModelError;
use crate::hash::{copy_hashed, hex, sha256};
use crate::location::MODEL_FILES;
use crate::quantized::QuantizedEncoder;
use crate::weights;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use tokenizers::{Tokenizer, TruncationParams};
use toolsearch_core::embed::{embed_as_text, normalize, EmbedError, Embedder};

/// Tokens read per text, [CLS] and [SEP] included; longer texts are truncated.
pub const MAX_TOKENS: usize = 256;

/// Texts run through the model together, at most.
const MAX_BATCH_TEXTS: usize = 16;

/// Padded tokens per batch, at most: bounds the attention matrices' memory.
const MAX_BATCH_TOKENS: usize = 512;

/// What makes vectors differ beyond the files: the pooling and the token limit.
const RECIPE: &str = "mean-pool/l2/max-tokens-256";

/// What makes a query's vector differ from the same text's: the dense layers in bytes, and the
/// query's token limit.
const QUERY_RECIPE: &str = "query-dense-int8/max-tokens-128";

/// Tokens a query computed in bytes is read to, [CLS] and [SEP] included: the length the model
/// was trained on (its own tokenizer file truncates there). The encoder's work grows faster
/// than a query's tokens, and a 400-character query of digits and punctuation reaches 350.
pub const MAX_QUERY_TOKENS: usize = 128;

/// A loaded model. Shared by `&self` between threads; each call runs on the caller's thread
/// (candle's matrix products use the rayon pool).
pub struct BertEmbedder {
    /// The f32 encoder that embeds texts (tools). Where queries have their own encoder, it is
    /// read from the model's file when texts first come, let go while none do
    /// ([`Embedder::idle`]: 40 MB of dense layers for the default model), and read again when
    /// they do.
    texts: Mutex<Option<Arc<Encoder>>>,
    config: Config,
    /// Where the model's weights are in `model.safetensors` (`bert.`, ...; none at the root).
    root: Option<String>,
    /// The sha256 of `model.safetensors` as first loaded: the file read again must be the same.
    weights_hash: [u8; 32],
    /// The same model with its dense layers in bytes, for a lone query, where the CPU has a
    /// byte multiply-add; `None` embeds queries as texts.
    query_model: Option<QuantizedEncoder>,
    /// Names the vectors of `query_model` (the identity otherwise).
    query_identity: String,
    tokenizer: Tokenizer,
    device: Device,
    dims: usize,
    max_tokens: usize,
    identity: String,
    dir: PathBuf,
    max_batch_texts: usize,
    max_batch_tokens: usize,
}

impl std::fmt::Debug for BertEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertEmbedder")
            .field("dir", &self.dir)
            .field("dims", &self.dims)
            .field("identity", &self.identity)
            .finish()
    }
}

fn read(dir: &Path, file: &'static str) -> Result<Vec<u8>, ModelError> {
    let path = dir.join(file);
    std::fs::read(&path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            if dir.is_dir() {
                ModelError::MissingFile {
                    dir: dir.to_path_buf(),
                    file,
                }
            } else {
                ModelError::MissingDir {
                    dir: dir.to_path_buf(),
                }
            }
        } else {
            ModelError::io(path, source)
        }
    })
}

fn identity_from(file_hashes: &[[u8; 32]]) -> String {
    let mut joined = Vec::with_capacity(32 * file_hashes.len() + RECIPE.len());
    for hash in file_hashes {
        joined.extend_from_slice(hash);
    }
    joined.extend_from_slice(RECIPE.as_bytes());
    format!("bert-sentence/{}", &hex(&sha256(&joined))[..32])
}

/// The identity of the model in `dir` without loading it: a hash of its three files and of how
/// vectors are pooled. The same files give the same identity in any folder.
pub fn model_identity(dir: &Path) -> Result<String, ModelError> {
    let mut hashes = Vec::with_capacity(MODEL_FILES.len());
    for file in MODEL_FILES {
        let path = dir.join(file);
        let mut reader = std::fs::File::open(&path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                ModelError::MissingFile {
                    dir: dir.to_path_buf(),
                    file,
                }
            } else {
                ModelError::io(&path, source)
            }
        })?;
        hashes.push(
            copy_hashed(&mut reader, &mut std::io::sink()).map_err(|e| ModelError::io(&path, e))?,
        );
    }
    Ok(identity_from(&hashes))
}

impl BertEmbedder {
    /// Loads `config.json`, `tokenizer.json` and `model.safetensors` from `dir`. Any BERT-style
    /// sentence model works (the hidden size gives the dimensions).
    pub fn load(dir: &Path) -> Result<Self, ModelError> {
        if !dir.is_dir() {
            return Err(ModelError::MissingDir {
                dir: dir.to_path_buf(),
            });
        }
        let config_bytes = read(dir, "config.json")?;
        let tokenizer_bytes = read(dir, "tokenizer.json")?;
        let weights = read(dir, "model.safetensors")?;
        let weights_hash = sha256(&weights);
        let identity = identity_from(&[
            sha256(&config_bytes),
            sha256(&tokenizer_bytes),
            weights_hash,
        ]);

        let config_path = dir.join("config.json");
        let config: Config =
            serde_json::from_slice(&config_bytes).map_err(|e| ModelError::Config {
                path: config_path.clone(),
                message: e.to_string(),
            })?;
        if config.hidden_size == 0 {
            return Err(ModelError::Config {
                path: config_path,
                message: "hidden_size is 0".into(),
            });
        }
        let max_tokens = MAX_TOKENS.min(config.max_position_embeddings);

        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer_error = |message: String| ModelError::Tokenizer {
            path: tokenizer_path.clone(),
            message,
        };
        let mut tokenizer =
            Tokenizer::from_bytes(&tokenizer_bytes).map_err(|e| tokenizer_error(e.to_string()))?;
        // The shipped tokenizer pads every text to 128 tokens; batches are padded here instead,
        // to their longest text.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..TruncationParams::default()
            }))
            .map_err(|e| tokenizer_error(e.to_string()))?;

        let device = Device::Cpu;
        let weights_path = dir.join("model.safetensors");
        let weights_error = |e: candle_core::Error| ModelError::Weights {
            path: weights_path.clone(),
            message: e.to_string(),
        };
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)
            .map_err(weights_error)?;
        let root = root_prefix(&vb, &config);
        let words = model_root(vb.clone(), &config)
            .pp("embeddings.word_embeddings")
            .get((config.vocab_size, config.hidden_size), "weight")
            .map_err(weights_error)?;
        let query_model =
            QuantizedEncoder::load(model_root(vb.clone(), &config), &config, words.clone())
                .map_err(weights_error)?;
        // Queries need the f32 encoder only where the CPU has no byte multiply-add; texts read it
        // when they first come (a catalog whose vectors are all cached never does).
        let texts = match query_model {
            Some(_) => None,
            None => Some(Arc::new(
                Encoder::load(vb, &config, Some(words)).map_err(weights_error)?,
            )),
        };
        let query_identity = match query_model {
            Some(_) => format!("{identity}/{QUERY_RECIPE}"),
            None => identity.clone(),
        };
        let queries_by = query_model
            .as_ref()
            .map_or("f32 products", QuantizedEncoder::products);
        tracing::debug!(dir = %dir.display(), %identity, dims = config.hidden_size, queries_by, "embedding model loaded");
        Ok(Self {
            texts: Mutex::new(texts),
            dims: config.hidden_size,
            config,
            root,
            weights_hash,
            query_model,
            query_identity,
            tokenizer,
            device,
            max_tokens,
            identity,
            dir: dir.to_path_buf(),
            max_batch_texts: MAX_BATCH_TEXTS,
            max_batch_tokens: MAX_BATCH_TOKENS,
        })
    }

    /// Changes how many texts (at most) and padded tokens (at most) run through the model at
    /// once; larger batches use the cores better, smaller ones pad less. Both are at least 1.
    pub fn with_batch_limits(mut self, texts: usize, tokens: usize) -> Self {
        self.max_batch_texts = texts.max(1);
        self.max_batch_tokens = tokens.max(1);
        self
    }

    /// The folder the model was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Tokens read per text, at most.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    fn model_error(&self, message: impl std::fmt::Display) -> EmbedError {
        EmbedError::model(&self.identity, message)
    }

    /// Whether the encoder that embeds texts is in memory (see [`Embedder::idle`]).
    pub fn holds_text_encoder(&self) -> bool {
        self.texts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// The encoder that embeds texts, read from the model's file if it is not in memory. The
    /// file must be the one first loaded: other weights would give vectors that do not match
    /// those already made under this model's identity.
    fn text_encoder(&self) -> Result<Arc<Encoder>, EmbedError> {
        let mut held = self.texts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(encoder) = &*held {
            return Ok(encoder.clone());
        }
        let path = self.dir.join("model.safetensors");
        // Every tensor but the word embeddings, which the byte encoder holds already; the file
        // is hashed in the same pass that reads them.
        let shared = |name: &str| name.ends_with("embeddings.word_embeddings.weight");
        let words = self.query_model.as_ref().map(|q| q.words().clone());
        let (hash, tensors) =
            weights::read_tensors(&path, |name| words.is_none() || !shared(name), &self.device)
                .map_err(|e| self.model_error(format!("reading {}: {e}", path.display())))?;
        if hash != self.weights_hash {
            return Err(self.model_error(format!(
                "{} changed since the model was loaded; restart to use the new files",
                path.display()
            )));
        }
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &self.device);
        let vb = match &self.root {
            Some(prefix) => vb.pp(prefix),
            None => vb,
        };
        let encoder = Encoder::load_rooted(vb, &self.config, words)
            .map_err(|e| self.model_error(format!("reading {}: {e}", path.display())))?;
        let encoder = Arc::new(encoder);
        *held = Some(encoder.clone());
        tracing::debug!(dir = %self.dir.display(), "the encoder for texts is read");
        Ok(encoder)
    }

    /// Runs one batch of token-id sequences (unpadded) and returns their pooled vectors.
    fn run_batch(
        &self,
        encoder: &Encoder,
        sequences: &[&[u32]],
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let longest = sequences.iter().map(|s| s.len()).max().unwrap_or(0);
        if longest == 0 {
            return Ok(vec![vec![0.0; self.dims]; sequences.len()]);
        }
        let mut ids = Vec::with_capacity(sequences.len() * longest);
        let mut mask = Vec::with_capacity(sequences.len() * longest);
        for sequence in sequences {
            ids.extend_from_slice(sequence);
            ids.resize(ids.len() + longest - sequence.len(), 0);
            mask.extend(std::iter::repeat_n(1u32, sequence.len()));
            mask.extend(std::iter::repeat_n(0u32, longest - sequence.len()));
        }
        let shape = (sequences.len(), longest);
        let pooled = (|| -> candle_core::Result<Vec<Vec<f32>>> {
            let ids = Tensor::from_vec(ids, shape, &self.device)?;
            let mask = Tensor::from_vec(mask, shape, &self.device)?;
            let types = ids.zeros_like()?;
            let hidden = encoder.forward(&ids, &types, &mask)?;
            // Mean over the real tokens only: padded positions are masked out of the sum and the
            // count.
            let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
            let counts = mask.sum(1)?;
            summed.broadcast_div(&counts)?.to_vec2::<f32>()
        })()
        .map_err(|e| self.model_error(e))?;
        Ok(pooled
            .into_iter()
            .map(|mut v| {
                normalize(&mut v);
                v
            })
            .collect())
    }
}

impl BertEmbedder {
    /// Runs the batches. A lone batch (a query) runs on the caller's thread, and candle splits its
    /// matrix products across the shared rayon pool: one short text leaves nothing else to run
    /// side by side. Several batches (indexing) run side by side instead, one per core, each on
    /// a pool of one thread: a batch's products are small enough that cores splitting one of them
    /// mostly wait on each other (about 1.6x the tools per second on 2 cores; BENCHMARKS.md).
    fn run_batches(
        &self,
        batches: &[&[usize]],
        sequences: &[&[u32]],
    ) -> Result<Vec<Vec<Vec<f32>>>, EmbedError> {
        let encoder = self.text_encoder()?;
        let run = |batch: &[usize]| {
            let batch: Vec<&[u32]> = batch.iter().map(|&i| sequences[i]).collect();
            self.run_batch(&encoder, &batch)
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = cores.clamp(1, batches.len().max(1));
        if workers == 1 {
            return batches.iter().map(|batch| run(batch)).collect();
        }
        let mut results: Vec<Option<Result<Vec<Vec<f32>>, EmbedError>>> =
            (0..batches.len()).map(|_| None).collect();
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|worker| {
                    let run = &run;
                    scope.spawn(move || {
                        let mine = || {
                            batches
                                .iter()
                                .enumerate()
                                .skip(worker)
                                .step_by(workers)
                                .map(|(index, batch)| (index, run(batch)))
                                .collect::<Vec<_>>()
                        };
                        // Products split for the shared pool run one after the other here.
                        match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
                            Ok(pool) => pool.install(mine),
                            Err(_) => mine(),
                        }
                    })
                })
                .collect();
            for handle in handles {
                match handle.join() {
                    Ok(done) => {
                        for (index, result) in done {
                            results[index] = Some(result);
                        }
                    }
                    Err(_) => return Err(self.model_error("an embedding thread panicked")),
                }
            }
            Ok(())
        })?;
        results
            .into_iter()
            .map(|result| result.unwrap_or_else(|| Err(self.model_error("a batch was not run"))))
            .collect()
    }
}

impl Embedder for BertEmbedder {
    fn model_id(&self) -> &str {
        &self.identity
    }

    fn dimensions(&self) -> usize {
        self.dims
    }

    /// Through the encoder with its dense layers in bytes where the CPU has a byte
    /// multiply-add (a few times faster for a lone text, cosine 0.993 or more to the f32
    /// vector on the evaluation queries); as a text otherwise.
    fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
        let Some(model) = &self.query_model else {
            return embed_as_text(self, query);
        };
        let encoding = self
            .tokenizer
            .encode(query, true)
            .map_err(|e| self.model_error(format!("tokenizing failed: {e}")))?;
        let ids = query_ids(encoding.get_ids(), MAX_QUERY_TOKENS);
        let ids = ids.as_ref();
        // Inside the shared pool where a long text's products are split between two cores
        // (`rayon::join` then hands work to a worker rather than waking the pool for each
        // product); on this thread otherwise, with no hand-off at all.
        let pooled = if model.splits_products() {
            rayon::scope(|_| model.pooled(ids))
        } else {
            model.pooled(ids)
        };
        let mut vector = pooled.map_err(|e| self.model_error(e))?;
        normalize(&mut vector);
        Ok(vector)
    }

    fn query_model_id(&self) -> &str {
        &self.query_identity
    }

    /// Lets the f32 encoder go when queries have their own; the next texts read it again.
    fn idle(&self) {
        if self.query_model.is_some() {
            self.texts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
        }
    }

    /// Tokenizes all texts, then runs them in batches of similar length (sorted by token count,
    /// so little padding is computed), and returns the vectors in the input order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| self.model_error(format!("tokenizing failed: {e}")))?;
        let sequences: Vec<&[u32]> = encodings.iter().map(|e| e.get_ids()).collect();
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| (sequences[i].len(), i));

        let mut batches: Vec<&[usize]> = Vec::new();
        let mut start = 0;
        while start < order.len() {
            // Sorted ascending, so the last text of a batch is its longest.
            let mut end = start + 1;
            while end < order.len()
                && end - start < self.max_batch_texts
                && (end - start + 1) * sequences[order[end]].len() <= self.max_batch_tokens
            {
                end += 1;
            }
            batches.push(&order[start..end]);
            start = end;
        }
        let vectors = self.run_batches(&batches, &sequences)?;
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for (batch, vectors) in batches.iter().zip(vectors) {
            for (&index, vector) in batch.iter().zip(vectors) {
                out[index] = vector;
            }
        }
        Ok(out)
    }
}

/// A query's token ids cut to `max`: its first `max - 1` and its last ([SEP]), as the tokenizer's
/// own truncation keeps them.
fn query_ids(ids: &[u32], max: usize) -> std::borrow::Cow<'_, [u32]> {
    match ids.split_last() {
        Some((&last, rest)) if ids.len() > max && max > 0 => {
            let mut cut = rest[..max - 1].to_vec();
            cut.push(last);
            cut.into()
        }
        _ => ids.into(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_query_keeps_its_first_tokens_and_its_last() {
        let ids: Vec<u32> = (0..10).collect();
        assert_eq!(super::query_ids(&ids, 4).as_ref(), [0, 1, 2, 9]);
        assert_eq!(super::query_ids(&ids, 10).as_ref(), ids.as_slice());
        assert_eq!(super::query_ids(&ids, 11).as_ref(), ids.as_slice());
        assert!(super::query_ids(&[], 4).is_empty());
    }

    use super::*;

    #[test]
    fn identity_depends_on_every_file() {
        let a = identity_from(&[[1; 32], [2; 32], [3; 32]]);
        assert_eq!(a, identity_from(&[[1; 32], [2; 32], [3; 32]]));
        assert_ne!(a, identity_from(&[[1; 32], [2; 32], [4; 32]]));
        assert_ne!(a, identity_from(&[[9; 32], [2; 32], [3; 32]]));
        assert!(a.starts_with("bert-sentence/"));
    }
}
