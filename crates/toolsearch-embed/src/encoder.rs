//! The BERT encoder a sentence model runs: embeddings, then self-attention and feed-forward
//! layers, the same computation as `candle_transformers::models::bert::BertModel` (whose `Config`
//! and weight names it reads) with two changes for speed on a CPU:
//!
//! - the exact (erf) GELU of the feed-forward layers is computed over a whole buffer with a
//!   branch-free approximation of erf that the compiler vectorises (absolute error under 2e-6),
//!   where candle calls a scalar `erff` per element (about a tenth of a long query's time);
//! - the query, key and value projections are one matrix product instead of three.

use candle_core::{DType, Module, Result, Tensor, D};
use candle_nn::{embedding, layer_norm, linear, Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

/// What the encoder reads of a BERT-style `config.json`, under the names Hugging Face writes
/// and `candle_transformers::models::bert::Config` reads. Declared here so that a build does
/// not compile candle's whole model zoo for one struct (about a tenth of a release build).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: HiddenAct,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub model_type: Option<String>,
}

/// The feed-forward activation, spelled as candle's BERT reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum HiddenAct {
    Gelu,
    GeluApproximate,
    Relu,
}

/// A loaded encoder: token ids in, one hidden state per token out.
pub(crate) struct Encoder {
    embeddings: Embeddings,
    layers: Vec<Layer>,
}

impl Encoder {
    /// Reads the weights under the model's root ([`model_root`]); the word embeddings are
    /// `words` when given (shared with another encoder of the same model, not read again).
    pub(crate) fn load(vb: VarBuilder, config: &Config, words: Option<Tensor>) -> Result<Self> {
        Self::load_rooted(model_root(vb, config), config, words)
    }

    /// As [`Encoder::load`], from weights already under the model's root.
    pub(crate) fn load_rooted(
        vb: VarBuilder,
        config: &Config,
        words: Option<Tensor>,
    ) -> Result<Self> {
        let embeddings = Embeddings::load(vb.pp("embeddings"), config, words)?;
        let layers = (0..config.num_hidden_layers)
            .map(|i| Layer::load(vb.pp(format!("encoder.layer.{i}")), config))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { embeddings, layers })
    }

    /// `ids`, `types` and `mask` are (batch, tokens); the mask is 1 for a token, 0 for padding.
    pub(crate) fn forward(&self, ids: &Tensor, types: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let mut hidden = self.embeddings.forward(ids, types)?;
        // 0 where a token may be attended to, the most negative f32 where it is padding.
        let mask = mask.unsqueeze(1)?.unsqueeze(1)?.to_dtype(hidden.dtype())?;
        let mask = (mask.ones_like()? - &mask)?
            .broadcast_mul(&Tensor::new(f32::MIN, mask.device())?.to_dtype(hidden.dtype())?)?;
        for layer in &self.layers {
            hidden = layer.forward(&hidden, &mask)?;
        }
        Ok(hidden)
    }
}

/// The weights under `bert.`, `<model_type>.` or the root, as candle's BERT reads them.
pub(crate) fn model_root<'a>(vb: VarBuilder<'a>, config: &Config) -> VarBuilder<'a> {
    match root_prefix(&vb, config) {
        Some(prefix) => vb.pp(prefix),
        None => vb,
    }
}

/// The prefix of the model's weights, `bert` or `<model_type>`, or none (at the root).
pub(crate) fn root_prefix(vb: &VarBuilder, config: &Config) -> Option<String> {
    if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
        return Some("bert".into());
    }
    config
        .model_type
        .clone()
        .filter(|prefix| vb.contains_tensor(&format!("{prefix}.embeddings.word_embeddings.weight")))
}

struct Embeddings {
    words: Embedding,
    positions: Embedding,
    token_types: Embedding,
    norm: LayerNorm,
}

impl Embeddings {
    fn load(vb: VarBuilder, config: &Config, words: Option<Tensor>) -> Result<Self> {
        let words = match words {
            Some(words) => Embedding::new(words, config.hidden_size),
            None => embedding(
                config.vocab_size,
                config.hidden_size,
                vb.pp("word_embeddings"),
            )?,
        };
        Ok(Self {
            words,
            positions: embedding(
                config.max_position_embeddings,
                config.hidden_size,
                vb.pp("position_embeddings"),
            )?,
            token_types: embedding(
                config.type_vocab_size,
                config.hidden_size,
                vb.pp("token_type_embeddings"),
            )?,
            norm: layer_norm(
                config.hidden_size,
                config.layer_norm_eps,
                vb.pp("LayerNorm"),
            )?,
        })
    }

    fn forward(&self, ids: &Tensor, types: &Tensor) -> Result<Tensor> {
        let (_, tokens) = ids.dims2()?;
        let positions: Vec<u32> = (0..tokens as u32).collect();
        let positions = Tensor::new(positions.as_slice(), ids.device())?;
        let sum = (self.words.forward(ids)? + self.token_types.forward(types)?)?
            .broadcast_add(&self.positions.forward(&positions)?)?;
        self.norm.forward(&sum)
    }
}

/// A dense layer, then the residual added and layer-normalised: how both halves of a BERT
/// layer end.
struct DenseNorm {
    dense: Linear,
    norm: LayerNorm,
}

impl DenseNorm {
    fn load(vb: VarBuilder, inputs: usize, config: &Config) -> Result<Self> {
        Ok(Self {
            dense: linear(inputs, config.hidden_size, vb.pp("dense"))?,
            norm: layer_norm(
                config.hidden_size,
                config.layer_norm_eps,
                vb.pp("LayerNorm"),
            )?,
        })
    }

    fn forward(&self, xs: &Tensor, residual: &Tensor) -> Result<Tensor> {
        self.norm.forward(&(self.dense.forward(xs)? + residual)?)
    }
}

struct Layer {
    /// Query, key and value projections stacked: one product gives all three.
    qkv: Linear,
    heads: usize,
    head_size: usize,
    attention_output: DenseNorm,
    intermediate: Linear,
    activation: HiddenAct,
    output: DenseNorm,
}

impl Layer {
    fn load(vb: VarBuilder, config: &Config) -> Result<Self> {
        let hidden = config.hidden_size;
        let attention = vb.pp("attention");
        let projections = ["query", "key", "value"]
            .iter()
            .map(|name| linear(hidden, hidden, attention.pp("self").pp(*name)))
            .collect::<Result<Vec<_>>>()?;
        let weights: Vec<&Tensor> = projections.iter().map(|p| p.weight()).collect();
        let biases = projections
            .iter()
            .map(|p| {
                p.bias()
                    .cloned()
                    .ok_or_else(|| candle_core::Error::Msg("a projection has no bias".into()))
            })
            .collect::<Result<Vec<_>>>()?;
        let qkv = Linear::new(Tensor::cat(&weights, 0)?, Some(Tensor::cat(&biases, 0)?));
        Ok(Self {
            qkv,
            heads: config.num_attention_heads,
            head_size: hidden / config.num_attention_heads,
            attention_output: DenseNorm::load(attention.pp("output"), hidden, config)?,
            intermediate: linear(
                hidden,
                config.intermediate_size,
                vb.pp("intermediate").pp("dense"),
            )?,
            activation: config.hidden_act,
            output: DenseNorm::load(vb.pp("output"), config.intermediate_size, config)?,
        })
    }

    fn forward(&self, hidden: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (batch, tokens, width) = hidden.dims3()?;
        let qkv = self.qkv.forward(hidden)?;
        // (batch, tokens, width) → (batch, heads, tokens, head_size)
        let split = |i: usize| -> Result<Tensor> {
            qkv.narrow(D::Minus1, i * width, width)?
                .reshape((batch, tokens, self.heads, self.head_size))?
                .transpose(1, 2)?
                .contiguous()
        };
        let (query, key, value) = (split(0)?, split(1)?, split(2)?);
        let scores = (query.matmul(&key.t()?)? / (self.head_size as f64).sqrt())?;
        let probabilities = candle_nn::ops::softmax(&scores.broadcast_add(mask)?, D::Minus1)?;
        let context = probabilities
            .matmul(&value)?
            .transpose(1, 2)?
            .contiguous()?
            .flatten_from(D::Minus2)?;
        let attended = self.attention_output.forward(&context, hidden)?;
        let inner = self.intermediate.forward(&attended)?;
        let inner = match self.activation {
            HiddenAct::Gelu => gelu_erf(&inner)?,
            HiddenAct::GeluApproximate => inner.gelu()?,
            HiddenAct::Relu => inner.relu()?,
        };
        self.output.forward(&inner, &attended)
    }
}

/// `x · Φ(x)`, the exact GELU, over a whole f32 tensor at once (other types: candle's own).
fn gelu_erf(xs: &Tensor) -> Result<Tensor> {
    if xs.dtype() != DType::F32 {
        return xs.gelu_erf();
    }
    let mut values = xs.flatten_all()?.to_vec1::<f32>()?;
    gelu_in_place(&mut values);
    Tensor::from_vec(values, xs.shape(), xs.device())
}

pub(crate) fn gelu_in_place(values: &mut [f32]) {
    for v in values.iter_mut() {
        let x = *v;
        *v = 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// erf by Abramowitz and Stegun 7.1.28: `1 - (1 + a1·x + … + a6·x⁶)^-16` for x ≥ 0, odd
/// symmetry below; absolute error 3e-7 in exact arithmetic, under 2e-6 in f32 (the sixteenth
/// power multiplies the rounding of the polynomial). No branches and no calls, so a loop of it
/// vectorises.
#[inline(always)]
fn erf(x: f32) -> f32 {
    const A: [f32; 6] = [
        0.070_523_08,
        0.042_282_01,
        0.009_270_527,
        0.000_152_014_3,
        0.000_276_567_2,
        0.000_043_063_8,
    ];
    // Past 6 erf is 1 in f32, and the clamp keeps the sixteenth power finite.
    let a = x.abs().min(6.0);
    let p = 1.0 + a * (A[0] + a * (A[1] + a * (A[2] + a * (A[3] + a * (A[4] + a * A[5])))));
    let t = 1.0 / p;
    let t2 = t * t;
    let t4 = t2 * t2;
    let t8 = t4 * t4;
    (1.0 - t8 * t8).copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::peers;
    use candle_core::Device;

    /// The model's weights and config, ours and as candle's BERT reads it, or `None` (skipped)
    /// when it is not installed.
    fn weights_and_candles_config(
        test: &str,
    ) -> Option<(
        VarBuilder<'static>,
        Config,
        candle_transformers::models::bert::Config,
    )> {
        let dir = peers::model_or_skip(test)?;
        let text = std::fs::read(dir.join("config.json")).unwrap();
        let config: Config = serde_json::from_slice(&text).unwrap();
        let candles = serde_json::from_slice(&text).unwrap();
        let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
        let vb = VarBuilder::from_buffered_safetensors(bytes, DType::F32, &Device::Cpu).unwrap();
        Some((vb, config, candles))
    }

    #[test]
    fn the_encoder_computes_what_candles_bert_computes() {
        let Some((vb, config, candles)) =
            weights_and_candles_config("the_encoder_computes_what_candles_bert_computes")
        else {
            return;
        };
        assert_eq!(config.hidden_size, candles.hidden_size);
        assert_eq!(config.num_hidden_layers, candles.num_hidden_layers);
        assert_eq!(config.layer_norm_eps, candles.layer_norm_eps);
        let ours = Encoder::load(vb.clone(), &config, None).unwrap();
        let candle = candle_transformers::models::bert::BertModel::load(vb, &candles).unwrap();
        // Two texts of 9 and 5 tokens, the second padded: the mask must hide its padding.
        let ids = [
            [101u32, 2128, 2019, 10373, 2000, 1037, 11729, 1012, 102],
            [101, 4633, 4228, 1999, 102, 0, 0, 0, 0],
        ];
        let mask = [[1u32; 9], [1, 1, 1, 1, 1, 0, 0, 0, 0]];
        let ids = Tensor::new(&ids, &Device::Cpu).unwrap();
        let mask = Tensor::new(&mask, &Device::Cpu).unwrap();
        let types = ids.zeros_like().unwrap();
        let a = ours.forward(&ids, &types, &mask).unwrap();
        let b = candle.forward(&ids, &types, Some(&mask)).unwrap();
        assert_eq!(a.dims(), b.dims());
        // Padding positions differ by design only in what nothing reads; compare the tokens.
        for (text, tokens) in [(0usize, 9usize), (1, 5)] {
            let a = a.get(text).unwrap().narrow(0, 0, tokens).unwrap();
            let b = b.get(text).unwrap().narrow(0, 0, tokens).unwrap();
            let diff = (a - b)
                .unwrap()
                .abs()
                .unwrap()
                .flatten_all()
                .unwrap()
                .max(0)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(diff < 1e-5, "text {text}: hidden states differ by {diff}");
        }
    }

    #[test]
    fn erf_matches_the_exact_function_to_2e_6() {
        let mut worst = 0.0f64;
        for i in -80_000..=80_000 {
            let x = i as f32 * 1e-4;
            let exact = candle_core::cpu::erf::erf_f64(f64::from(x));
            worst = worst.max((f64::from(erf(x)) - exact).abs());
        }
        assert!(worst < 2e-6, "largest error {worst}");
        assert_eq!(erf(40.0), 1.0);
        assert_eq!(erf(-40.0), -1.0);
        assert_eq!(erf(0.0), 0.0);
    }

    #[test]
    fn gelu_matches_candles_exact_gelu() {
        let values: Vec<f32> = (-600..=600).map(|i| i as f32 * 0.01).collect();
        let xs = Tensor::new(values.as_slice(), &Device::Cpu).unwrap();
        let ours = gelu_erf(&xs).unwrap().to_vec1::<f32>().unwrap();
        let candle = xs.gelu_erf().unwrap().to_vec1::<f32>().unwrap();
        for ((x, a), b) in values.iter().zip(&ours).zip(&candle) {
            assert!((a - b).abs() < 1e-6, "gelu({x}): {a} against {b}");
        }
    }
}
