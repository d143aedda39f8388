//! The encoder for one short text (a query) with its dense layers in 8-bit integers.
//!
//! A query is a few dozen tokens, so its matrix products are thin: each weight is used a
//! handful of times per read. In f32 that is bound by reading the layers' 42 MB of weights and
//! by a general matrix library's per-product set-up; in bytes the weights are a quarter of that
//! and one `vpdpbusd` does 32 (AVX-VNNI) or 64 (AVX-512 VNNI) multiply-adds. Used only where
//! the CPU has one of them ([`Kernel::fast`]); elsewhere queries run in f32 like every text.
//!
//! - Weights: each output row scaled so its largest magnitude is 127 and rounded (per row, once
//!   at load). Activations: each token's inputs scaled the same way when the layer runs, then
//!   shifted by 128 into unsigned bytes (what `vpdpbusd` multiplies); the shift is taken back
//!   out exactly with each row's sum of weights. The integer sums are exact, so both kernels
//!   give the same vector.
//! - Everything else (embeddings, attention, layer norms, GELU, pooling) stays f32; attention's
//!   two products per head go to `gemm`, the library candle's own products run on.
//! - A short query runs on one core: its products are too small to pay for waking another.
//!   A long one's larger products are split by token blocks between two (`rayon::join`, the
//!   whole query running inside the pool so that the split costs no wake-up of the caller).

use crate::encoder::{gelu_in_place, Config, HiddenAct};
use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

/// Inputs are padded to a multiple of this many bytes (one 512-bit register, two 256-bit ones).
const LANE_BYTES: usize = 64;

/// Tokens computed together against one weight row.
const TOKEN_BLOCK: usize = 4;

/// A dense layer with 8-bit weights.
pub(crate) struct QuantizedLinear {
    outputs: usize,
    inputs: usize,
    /// `inputs` rounded up to [`LANE_BYTES`]; the padding weights are 0.
    stride: usize,
    weights: Vec<i8>,
    scales: Vec<f32>,
    /// 128 × the row's weight sum: what the activations' shift adds to each row's sum.
    shift_correction: Vec<i32>,
    bias: Vec<f32>,
}

impl QuantizedLinear {
    /// From candle's `(outputs, inputs)` weight and `(outputs)` bias.
    pub(crate) fn new(weight: &Tensor, bias: &Tensor) -> Result<Self> {
        let (outputs, inputs) = weight.dims2()?;
        let rows = weight.to_vec2::<f32>()?;
        let bias = bias.to_vec1::<f32>()?;
        if bias.len() != outputs {
            return Err(candle_core::Error::Msg(format!(
                "a dense layer has {outputs} outputs but {} biases",
                bias.len()
            )));
        }
        let stride = inputs.div_ceil(LANE_BYTES) * LANE_BYTES;
        let mut weights = vec![0i8; outputs * stride];
        let mut scales = Vec::with_capacity(outputs);
        let mut shift_correction = Vec::with_capacity(outputs);
        for (row, out) in rows.iter().zip(weights.chunks_exact_mut(stride)) {
            let scale = quantize_into(row, out);
            scales.push(scale);
            shift_correction.push(128 * out.iter().map(|&w| i32::from(w)).sum::<i32>());
        }
        Ok(Self {
            outputs,
            inputs,
            stride,
            weights,
            scales,
            shift_correction,
            bias,
        })
    }

    /// `input` is `tokens × inputs`, row-major; returns `tokens × outputs`.
    #[inline(always)]
    fn forward(&self, input: &[f32], tokens: usize, kernel: Kernel) -> Vec<f32> {
        let quantized = QuantizedRows::new(input, tokens, self.inputs, self.stride);
        let padded = quantized.padded_tokens();
        let mut sums = vec![0i32; padded * self.outputs];
        let blocks = padded / TOKEN_BLOCK;
        if blocks >= 2 && padded * self.outputs * self.stride >= SPLIT_MULTIPLY_ADDS {
            // A long text's product: half its token blocks on another core.
            let half = blocks / 2 * TOKEN_BLOCK;
            let (bytes_a, bytes_b) = quantized.bytes.split_at(half * self.stride);
            let (sums_a, sums_b) = sums.split_at_mut(half * self.outputs);
            rayon::join(
                || kernel.run(&self.weights, self.stride, bytes_a, sums_a),
                || kernel.run(&self.weights, self.stride, bytes_b, sums_b),
            );
        } else {
            kernel.run(&self.weights, self.stride, &quantized.bytes, &mut sums);
        }
        let outputs = self.outputs;
        let mut out = vec![0f32; tokens * outputs];
        let (corrections, scales, biases) = (
            &self.shift_correction[..outputs],
            &self.scales[..outputs],
            &self.bias[..outputs],
        );
        for t in 0..tokens {
            let token_scale = quantized.scales[t];
            let sums = &sums[t * outputs..][..outputs];
            let row = &mut out[t * outputs..][..outputs];
            for o in 0..outputs {
                row[o] = (sums[o] - corrections[o]) as f32 * scales[o] * token_scale + biases[o];
            }
        }
        out
    }
}

/// Multiply-adds from which a product's token blocks are split between two cores (about 28
/// tokens for the feed-forward layers); below it, waking another core costs more than it
/// saves. On the evaluation queries (`query_latency` example): one core for every product
/// p50 3.9–4.1 / p99 14.5–14.6 ms; split from 4 Mi multiply-adds 4.1 / 11.8–12.0; from
/// 16 Mi 3.6–3.8 / 11.9–12.7; from 32 Mi 3.9 / 13.2–13.3.
const SPLIT_MULTIPLY_ADDS: usize = 16 << 20;

/// Scales `values` so the largest magnitude is 127, rounds them, writes each through `encode`
/// into `out` (whose extra room is left as it is) and returns the scale that gives them back
/// (0 for all zeros, each then `encode(0)`).
#[inline(always)]
fn quantize_with<T: Copy>(values: &[f32], out: &mut [T], encode: impl Fn(i32) -> T) -> f32 {
    let out = &mut out[..values.len()];
    let largest = max_abs(values);
    if largest == 0.0 || !largest.is_finite() {
        out.fill(encode(0));
        return 0.0;
    }
    let inverse = 127.0 / largest;
    for i in 0..values.len() {
        // Rounded half away from zero, as `f32::round` does, without its library call (which
        // stops the loop from vectorising); NaN becomes 0.
        let scaled = values[i] * inverse;
        let rounded = (scaled + 0.5f32.copysign(scaled)).clamp(-127.0, 127.0);
        out[i] = encode(small_to_i32(rounded));
    }
    largest / 127.0
}

/// `value` truncated to an i32, NaN as 0, for a value its caller keeps small (a quantized byte,
/// an exponent); anything else is clamped to ±2^30 first. `as i32` gives the same for such
/// values, but checks NaN and range one value at a time, which left the loops calling it scalar
/// (the quantizer and the softmax's `exp`: about 14% of a query, measured with the
/// `query_latency` example).
#[inline(always)]
fn small_to_i32(value: f32) -> i32 {
    const LIMIT: f32 = (1 << 30) as f32;
    let value = value.clamp(-LIMIT, LIMIT);
    let value = if value.is_nan() { 0.0 } else { value };
    #[allow(unsafe_code)]
    // SAFETY: `value` is finite and within ±2^30, so its truncation fits an i32.
    unsafe {
        value.to_int_unchecked::<i32>()
    }
}

/// Signed bytes, for weights.
#[inline(always)]
fn quantize_into(values: &[f32], out: &mut [i8]) -> f32 {
    quantize_with(values, out, |q| q as i8)
}

/// Shifted by 128 into unsigned bytes, as `vpdpbusd` takes one side, for activations.
#[inline(always)]
fn quantize_shifted_into(values: &[f32], out: &mut [u8]) -> f32 {
    quantize_with(values, out, |q| (q + 128) as u8)
}

/// A layer's input in bytes: each token scaled to ±127, shifted by 128 into `u8`, padded with
/// the byte for 0 (128) to the layer's stride and to a whole [`TOKEN_BLOCK`] of tokens.
struct QuantizedRows {
    bytes: Vec<u8>,
    /// One per token, padding included.
    scales: Vec<f32>,
}

impl QuantizedRows {
    fn padded_tokens(&self) -> usize {
        self.scales.len()
    }

    #[inline(always)]
    fn new(input: &[f32], tokens: usize, inputs: usize, stride: usize) -> Self {
        let padded_tokens = tokens.div_ceil(TOKEN_BLOCK) * TOKEN_BLOCK;
        let mut bytes = vec![128u8; padded_tokens * stride];
        let mut scales = vec![0f32; padded_tokens];
        for t in 0..tokens {
            scales[t] = quantize_shifted_into(
                &input[t * inputs..][..inputs],
                &mut bytes[t * stride..][..inputs],
            );
        }
        Self { bytes, scales }
    }
}

/// Which loop computes the integer sums: each gives exactly the same sums. The encoder runs
/// only where a multiply-add instruction on bytes exists ([`Kernel::fast`]): without one, the
/// sums cost more than the f32 products they replace (5 against 135 GMAC/s measured here), and
/// the model runs in f32 instead. The portable loop is the reference the others are tested
/// against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    #[cfg_attr(not(test), allow(dead_code))]
    Portable,
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
}

impl Kernel {
    /// The byte multiply-add this CPU has, if any: AVX-VNNI (256-bit), else AVX-512 VNNI
    /// (which measured no faster here, at twice the width).
    fn fast() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("avxvnni") {
                return Some(Self::AvxVnni);
            }
            if has!("avx512f") && has!("avx512vnni") {
                return Some(Self::Avx512Vnni);
            }
        }
        None
    }

    /// Every kernel this CPU can run (for the tests that hold them to the portable one).
    #[cfg(test)]
    fn available() -> Vec<Self> {
        let mut kernels = vec![Self::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("avxvnni") {
                kernels.push(Self::AvxVnni);
            }
            if has!("avx512f") && has!("avx512vnni") {
                kernels.push(Self::Avx512Vnni);
            }
        }
        kernels
    }

    fn run(self, weights: &[i8], stride: usize, input: &[u8], out: &mut [i32]) {
        match self {
            Self::Portable => sums_portable(weights, stride, input, out),
            #[cfg(target_arch = "x86_64")]
            #[allow(unsafe_code)]
            // SAFETY: chosen only when the CPU has AVX2 and AVX-VNNI (checked in `fast` and `available`).
            Self::AvxVnni => unsafe { vnni::sums(weights, stride, input, out) },
            #[cfg(target_arch = "x86_64")]
            #[allow(unsafe_code)]
            // SAFETY: chosen only when the CPU has AVX-512F and AVX-512 VNNI (checked in
            // `fast` and `available`).
            Self::Avx512Vnni => unsafe { vnni512::sums(weights, stride, input, out) },
        }
    }
}

fn sums_portable(weights: &[i8], stride: usize, input: &[u8], out: &mut [i32]) {
    let rows = weights.len() / stride;
    for (token, sums) in input.chunks_exact(stride).zip(out.chunks_exact_mut(rows)) {
        for (row, sum) in weights.chunks_exact(stride).zip(sums.iter_mut()) {
            *sum = token
                .iter()
                .zip(row)
                .map(|(&x, &w)| i32::from(x) * i32::from(w))
                .sum();
        }
    }
}

/// One `vpdpbusd` kernel: token blocks outermost, so that a block's four rows of bytes stay in
/// the first-level cache while every weight row streams past them; two weight rows at a time,
/// so that six loads feed eight multiply-adds. `$lane` bytes per step, in registers of
/// `$vector`; `$dpbusd` multiplies and adds, `$sum` adds a register's lanes.
#[cfg(target_arch = "x86_64")]
macro_rules! vpdpbusd_kernel {
    ($name:ident, $features:literal, $lane:literal, $vector:ty, $zero:expr, $load:expr,
     $dpbusd:path, $sum:expr) => {
        #[target_feature(enable = $features)]
        pub(super) fn $name(weights: &[i8], stride: usize, input: &[u8], out: &mut [i32]) {
            const LANE: usize = $lane;
            let padded = input.len() / stride;
            let rows = weights.len() / stride;
            let lanes = stride / LANE;
            assert!(
                stride.is_multiple_of(LANE)
                    && out.len() >= rows * padded
                    && input.len() == padded * stride
                    && padded.is_multiple_of(4)
            );
            #[allow(unsafe_code)]
            // SAFETY: `bytes` points into `weights` or `input` with `LANE` bytes after it:
            // every caller below stays within the bounds asserted above.
            let load = |bytes: *const u8| -> $vector { unsafe { $load(bytes) } };
            for t in (0..padded).step_by(4) {
                let x = input[t * stride..].as_ptr();
                let mut r = 0;
                while r < rows {
                    // Two rows, or the last one alone (its partner's sums are dropped).
                    let pair = r + 1 < rows;
                    let first = weights[r * stride..].as_ptr();
                    let second = weights[(if pair { r + 1 } else { r }) * stride..].as_ptr();
                    let mut acc: [$vector; 8] = [$zero; 8];
                    for c in 0..lanes {
                        #[allow(unsafe_code)]
                        // SAFETY: `c * LANE + LANE <= stride`; rows `r` and `r + 1` (or `r`
                        // again) lie in `weights`, tokens `t..t + 4` in `input`.
                        let (w0, w1, x0, x1, x2, x3) = unsafe {
                            (
                                load(first.add(c * LANE).cast()),
                                load(second.add(c * LANE).cast()),
                                load(x.add(c * LANE)),
                                load(x.add(stride + c * LANE)),
                                load(x.add(2 * stride + c * LANE)),
                                load(x.add(3 * stride + c * LANE)),
                            )
                        };
                        acc[0] = $dpbusd(acc[0], x0, w0);
                        acc[1] = $dpbusd(acc[1], x1, w0);
                        acc[2] = $dpbusd(acc[2], x2, w0);
                        acc[3] = $dpbusd(acc[3], x3, w0);
                        acc[4] = $dpbusd(acc[4], x0, w1);
                        acc[5] = $dpbusd(acc[5], x1, w1);
                        acc[6] = $dpbusd(acc[6], x2, w1);
                        acc[7] = $dpbusd(acc[7], x3, w1);
                    }
                    for (i, &a) in acc[..4].iter().enumerate() {
                        out[(t + i) * rows + r] = $sum(a);
                    }
                    if pair {
                        for (i, &a) in acc[4..].iter().enumerate() {
                            out[(t + i) * rows + r + 1] = $sum(a);
                        }
                    }
                    r += 2;
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::{
        __m256i, _mm256_castsi256_si128, _mm256_dpbusd_avx_epi32, _mm256_extracti128_si256,
        _mm256_loadu_si256, _mm256_setzero_si256, _mm_add_epi32, _mm_cvtsi128_si32,
        _mm_shuffle_epi32,
    };

    vpdpbusd_kernel!(
        sums,
        "avx2,avxvnni",
        32,
        __m256i,
        _mm256_setzero_si256(),
        |bytes: *const u8| _mm256_loadu_si256(bytes.cast()),
        _mm256_dpbusd_avx_epi32,
        horizontal_sum
    );

    #[inline]
    #[target_feature(enable = "avx2")]
    fn horizontal_sum(v: __m256i) -> i32 {
        let halves = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let pairs = _mm_add_epi32(halves, _mm_shuffle_epi32::<0b01_00_11_10>(halves));
        let all = _mm_add_epi32(pairs, _mm_shuffle_epi32::<0b10_11_00_01>(pairs));
        _mm_cvtsi128_si32(all)
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni512 {
    use std::arch::x86_64::{
        __m512i, _mm512_dpbusd_epi32, _mm512_loadu_si512, _mm512_reduce_add_epi32,
        _mm512_setzero_si512,
    };

    const _: () = assert!(super::LANE_BYTES == 64);

    vpdpbusd_kernel!(
        sums,
        "avx512f,avx512vnni",
        64,
        __m512i,
        _mm512_setzero_si512(),
        |bytes: *const u8| _mm512_loadu_si512(bytes.cast()),
        _mm512_dpbusd_epi32,
        _mm512_reduce_add_epi32
    );
}

/// A layer norm over one token's values.
struct Norm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
    eps: f32,
}

impl Norm {
    fn load(vb: VarBuilder, width: usize, eps: f64) -> Result<Self> {
        Ok(Self {
            gamma: vb.get(width, "weight")?.to_vec1()?,
            beta: vb.get(width, "bias")?.to_vec1()?,
            eps: eps as f32,
        })
    }

    /// Normalises each `width`-long row of `values` in place.
    #[inline(always)]
    fn apply(&self, values: &mut [f32]) {
        let width = self.gamma.len();
        let (gamma, beta) = (&self.gamma[..width], &self.beta[..width]);
        for row in values.chunks_exact_mut(width) {
            let mean = sum_of(row) / width as f32;
            for v in &mut *row {
                *v -= mean;
            }
            let variance = sum_of_squares(row) / width as f32;
            let inverse = 1.0 / (variance + self.eps).sqrt();
            for i in 0..width {
                row[i] = row[i] * inverse * gamma[i] + beta[i];
            }
        }
    }
}

struct Layer {
    qkv: QuantizedLinear,
    attention_output: QuantizedLinear,
    attention_norm: Norm,
    intermediate: QuantizedLinear,
    output: QuantizedLinear,
    output_norm: Norm,
}

/// The whole encoder for one text, its dense layers in bytes.
pub(crate) struct QuantizedEncoder {
    words: Tensor,
    positions: Vec<f32>,
    token_type: Vec<f32>,
    embedding_norm: Norm,
    layers: Vec<Layer>,
    width: usize,
    heads: usize,
    activation: HiddenAct,
    kernel: Kernel,
}

impl QuantizedEncoder {
    /// Reads the weights from `vb` (already at the model's root: `embeddings.`, `encoder.`),
    /// sharing `words` (the f32 encoder's word embeddings, the model's largest tensor), or
    /// `None` where the CPU has no byte multiply-add ([`Kernel::fast`]).
    pub(crate) fn load(vb: VarBuilder, config: &Config, words: Tensor) -> Result<Option<Self>> {
        let Some(kernel) = Kernel::fast() else {
            return Ok(None);
        };
        Self::load_with(vb, config, words, kernel).map(Some)
    }

    fn load_with(vb: VarBuilder, config: &Config, words: Tensor, kernel: Kernel) -> Result<Self> {
        let width = config.hidden_size;
        let embeddings = vb.pp("embeddings");
        if words.dims2()? != (config.vocab_size, width) {
            return Err(candle_core::Error::Msg(format!(
                "the word embeddings are {:?}, not {} × {width}",
                words.dims(),
                config.vocab_size
            )));
        }
        let positions = embeddings
            .get(
                (config.max_position_embeddings, width),
                "position_embeddings.weight",
            )?
            .flatten_all()?
            .to_vec1()?;
        let token_type = embeddings
            .get(
                (config.type_vocab_size, width),
                "token_type_embeddings.weight",
            )?
            .get(0)?
            .to_vec1()?;
        let embedding_norm = Norm::load(embeddings.pp("LayerNorm"), width, config.layer_norm_eps)?;
        let linear = |vb: VarBuilder, outputs: usize, inputs: usize| -> Result<QuantizedLinear> {
            QuantizedLinear::new(
                &vb.get((outputs, inputs), "weight")?,
                &vb.get(outputs, "bias")?,
            )
        };
        let layers = (0..config.num_hidden_layers)
            .map(|i| -> Result<Layer> {
                let vb = vb.pp(format!("encoder.layer.{i}"));
                let attention = vb.pp("attention");
                let projections = ["query", "key", "value"]
                    .iter()
                    .map(|name| {
                        let p = attention.pp("self").pp(*name);
                        Ok((p.get((width, width), "weight")?, p.get(width, "bias")?))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let weights: Vec<&Tensor> = projections.iter().map(|(w, _)| w).collect();
                let biases: Vec<&Tensor> = projections.iter().map(|(_, b)| b).collect();
                let qkv =
                    QuantizedLinear::new(&Tensor::cat(&weights, 0)?, &Tensor::cat(&biases, 0)?)?;
                let intermediate_size = config.intermediate_size;
                Ok(Layer {
                    qkv,
                    attention_output: linear(attention.pp("output").pp("dense"), width, width)?,
                    attention_norm: Norm::load(
                        attention.pp("output").pp("LayerNorm"),
                        width,
                        config.layer_norm_eps,
                    )?,
                    intermediate: linear(
                        vb.pp("intermediate").pp("dense"),
                        intermediate_size,
                        width,
                    )?,
                    output: linear(vb.pp("output").pp("dense"), width, intermediate_size)?,
                    output_norm: Norm::load(
                        vb.pp("output").pp("LayerNorm"),
                        width,
                        config.layer_norm_eps,
                    )?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            words,
            positions,
            token_type,
            embedding_norm,
            layers,
            width,
            heads: config.num_attention_heads,
            activation: config.hidden_act,
            kernel,
        })
    }

    /// The mean of the hidden states of `ids` (one text, no padding), not normalised.
    pub(crate) fn pooled(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let tokens = ids.len();
        let width = self.width;
        if tokens == 0 {
            return Ok(vec![0.0; width]);
        }
        if tokens * width > self.positions.len() {
            return Err(candle_core::Error::Msg(format!(
                "{tokens} tokens is more than the model's positions"
            )));
        }
        let ids_tensor = Tensor::new(ids, self.words.device())?;
        let mut hidden = self
            .words
            .index_select(&ids_tensor, 0)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        for (t, row) in hidden.chunks_exact_mut(width).enumerate() {
            for ((v, p), k) in row
                .iter_mut()
                .zip(&self.positions[t * width..])
                .zip(&self.token_type)
            {
                *v += p + k;
            }
        }
        self.embedding_norm.apply(&mut hidden);
        for layer in &self.layers {
            hidden = self.layer_on_this_cpu(layer, &hidden, tokens);
        }
        let mut pooled = vec![0f32; width];
        for row in hidden.chunks_exact(width) {
            for (p, v) in pooled.iter_mut().zip(row) {
                *p += v;
            }
        }
        for p in &mut pooled {
            *p /= tokens as f32;
        }
        Ok(pooled)
    }

    /// [`Self::layer`] compiled for AVX2 where the CPU has it: its f32 loops eight wide instead
    /// of four. The same operations in the same order, so the same vector.
    fn layer_on_this_cpu(&self, layer: &Layer, hidden: &[f32], tokens: usize) -> Vec<f32> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            #[allow(unsafe_code)]
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { self.layer_avx2(layer, hidden, tokens) };
        }
        self.layer(layer, hidden, tokens)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn layer_avx2(&self, layer: &Layer, hidden: &[f32], tokens: usize) -> Vec<f32> {
        self.layer(layer, hidden, tokens)
    }

    #[inline(always)]
    fn layer(&self, layer: &Layer, hidden: &[f32], tokens: usize) -> Vec<f32> {
        let width = self.width;
        let qkv = layer.qkv.forward(hidden, tokens, self.kernel);
        let context = self.attention(&qkv, tokens);
        let mut attended = layer
            .attention_output
            .forward(&context, tokens, self.kernel);
        add_into(&mut attended, hidden);
        layer.attention_norm.apply(&mut attended);
        let mut inner = layer.intermediate.forward(&attended, tokens, self.kernel);
        match self.activation {
            HiddenAct::Gelu => gelu_in_place(&mut inner),
            HiddenAct::GeluApproximate => inner.iter_mut().for_each(|x| {
                let c = (2.0 / std::f32::consts::PI).sqrt();
                *x = 0.5 * *x * (1.0 + (c * (*x + 0.044_715 * *x * *x * *x)).tanh());
            }),
            HiddenAct::Relu => inner.iter_mut().for_each(|x| *x = x.max(0.0)),
        }
        let mut out = layer.output.forward(&inner, tokens, self.kernel);
        add_into(&mut out, &attended);
        layer.output_norm.apply(&mut out);
        debug_assert_eq!(out.len(), tokens * width);
        out
    }

    /// Self-attention over one text: `qkv` is `tokens × 3·width` (queries, keys, values).
    #[inline(always)]
    // Indices, not iterators, in the element-wise loops (see `add_into`).
    #[allow(clippy::needless_range_loop)]
    fn attention(&self, qkv: &[f32], tokens: usize) -> Vec<f32> {
        let width = self.width;
        let head_size = width / self.heads;
        let scale = 1.0 / (head_size as f32).sqrt();
        let stride = 3 * width;
        let mut context = vec![0f32; tokens * width];
        let mut scores = vec![0f32; tokens * tokens];
        for head in 0..self.heads {
            let offset = head * head_size;
            // scores = scale · Q·Kᵀ, read in place from the stacked projections.
            let queries = View::new(&qkv[offset..], tokens, head_size, stride, 1);
            let keys_transposed = View::new(&qkv[width + offset..], head_size, tokens, 1, stride);
            matmul(&mut scores, tokens, queries, keys_transposed, scale);
            for row in scores.chunks_exact_mut(tokens) {
                let largest = max_of(row);
                for i in 0..row.len() {
                    row[i] = exp(row[i] - largest);
                }
                let inverse = 1.0 / sum_of(row);
                for i in 0..row.len() {
                    row[i] *= inverse;
                }
            }
            // context (this head's columns) = softmax(scores) · V.
            let weights = View::new(&scores, tokens, tokens, tokens, 1);
            let values = View::new(&qkv[2 * width + offset..], tokens, head_size, stride, 1);
            matmul(&mut context[offset..], width, weights, values, 1.0);
        }
        context
    }
}

/// A matrix read in place from a slice: element (r, c) at `r × row_step + c × column_step`.
#[derive(Clone, Copy)]
struct View<'a> {
    data: &'a [f32],
    rows: usize,
    columns: usize,
    row_step: usize,
    column_step: usize,
}

impl<'a> View<'a> {
    fn new(
        data: &'a [f32],
        rows: usize,
        columns: usize,
        row_step: usize,
        column_step: usize,
    ) -> Self {
        Self {
            data,
            rows,
            columns,
            row_step,
            column_step,
        }
    }

    /// Whether every element lies in `data`.
    fn fits(&self) -> bool {
        self.rows == 0
            || self.columns == 0
            || (self.rows - 1) * self.row_step + (self.columns - 1) * self.column_step
                < self.data.len()
    }
}

/// `dst = factor · lhs · rhs`, `dst` row-major with `dst_row_step` (its rows: `lhs.rows`, its
/// columns: `rhs.columns`), on the calling thread, by the matrix library candle uses.
fn matmul(dst: &mut [f32], dst_row_step: usize, lhs: View, rhs: View, factor: f32) {
    let (m, n, k) = (lhs.rows, rhs.columns, lhs.columns);
    assert!(
        lhs.fits()
            && rhs.fits()
            && rhs.rows == k
            && (m == 0 || n == 0 || (m - 1) * dst_row_step + n - 1 < dst.len()),
        "a matrix product's shapes do not fit its buffers"
    );
    if m == 0 || n == 0 {
        return;
    }
    #[allow(unsafe_code)]
    // SAFETY: every element the product reads or writes lies within its slice (asserted
    // above), the destination is borrowed mutably and the sources shared, so none overlap.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_row_step as isize,
            false,
            lhs.data.as_ptr(),
            lhs.column_step as isize,
            lhs.row_step as isize,
            rhs.data.as_ptr(),
            rhs.column_step as isize,
            rhs.row_step as isize,
            0.0,
            factor,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

// The element-wise helpers below loop over indices rather than zipped iterators: they are
// inlined into the one large function compiled for AVX2 (`layer_avx2`), where the compiler
// stops inlining iterator adapters and called `Zip::next` once per element (a quarter of a
// query's time, measured).

/// `values[i] += add[i]`.
#[inline(always)]
fn add_into(values: &mut [f32], add: &[f32]) {
    let add = &add[..values.len()];
    for i in 0..values.len() {
        values[i] += add[i];
    }
}

/// The largest magnitude, in eight running maxima (which the compiler keeps in one register).
#[inline(always)]
fn max_abs(values: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (chunks, rest) = values.as_chunks::<8>();
    for chunk in chunks {
        for l in 0..8 {
            lanes[l] = lanes[l].max(chunk[l].abs());
        }
    }
    for &v in rest {
        lanes[0] = lanes[0].max(v.abs());
    }
    lanes.into_iter().fold(0f32, f32::max)
}

/// The largest value, in eight running maxima.
#[inline(always)]
fn max_of(values: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let (chunks, rest) = values.as_chunks::<8>();
    for chunk in chunks {
        for l in 0..8 {
            lanes[l] = lanes[l].max(chunk[l]);
        }
    }
    for &v in rest {
        lanes[0] = lanes[0].max(v);
    }
    lanes.into_iter().fold(f32::NEG_INFINITY, f32::max)
}

/// The sum, in eight running sums.
#[inline(always)]
fn sum_of(values: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (chunks, rest) = values.as_chunks::<8>();
    for chunk in chunks {
        for l in 0..8 {
            lanes[l] += chunk[l];
        }
    }
    for &v in rest {
        lanes[0] += v;
    }
    lanes.into_iter().sum()
}

/// The sum of squares, in eight running sums.
#[inline(always)]
fn sum_of_squares(values: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (chunks, rest) = values.as_chunks::<8>();
    for chunk in chunks {
        for l in 0..8 {
            lanes[l] += chunk[l] * chunk[l];
        }
    }
    for &v in rest {
        lanes[0] += v * v;
    }
    lanes.into_iter().sum()
}

/// `e^x` for the softmax (x ≤ 0 there), without a library call so that a loop of it
/// vectorises: `2^n · p(r)` with `x = n·ln 2 + r`, `|r| ≤ ln 2 / 2`, and Cephes' degree-6
/// polynomial for `e^r` (relative error about 1e-7). Below -87 it is 0 within f32's normal
/// range.
#[inline(always)]
fn exp(x: f32) -> f32 {
    const LN2_HIGH: f32 = 0.693_359_4;
    const LN2_LOW: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = x - n * LN2_HIGH - n * LN2_LOW;
    let mut p = 1.987_569_1e-4f32;
    p = p.mul_add(r, 1.398_199_9e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 1.666_666_5e-1);
    p = p.mul_add(r, 0.5);
    let e_r = (p * r).mul_add(r, r) + 1.0;
    e_r * f32::from_bits(((small_to_i32(n) + 127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(tokens: usize, inputs: usize, seed: u32) -> Vec<f32> {
        (0..tokens * inputs)
            .map(|i| {
                ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 2001) as f32 / 1000.0
                    - 1.0
            })
            .collect()
    }

    #[test]
    fn exp_is_the_exponential_to_a_few_units_in_the_last_place() {
        for i in -8_700..=100 {
            let x = i as f32 * 0.01;
            let (got, exact) = (exp(x), f64::from(x).exp());
            assert!(
                ((f64::from(got) - exact) / exact).abs() < 5e-7,
                "exp({x}) = {got}, not {exact}"
            );
        }
        let floor = (-87.0f64).exp();
        assert!((f64::from(exp(-1000.0)) - floor).abs() < floor * 1e-6);
    }

    #[test]
    fn every_kernel_gives_the_same_integer_sums() {
        for (tokens, inputs, outputs) in [(1, 384, 64), (7, 384, 70), (13, 1536, 33), (4, 40, 3)] {
            let weight = Tensor::from_vec(
                rows(outputs, inputs, 7),
                (outputs, inputs),
                &candle_core::Device::Cpu,
            )
            .unwrap();
            let bias = Tensor::from_vec(vec![0.5f32; outputs], outputs, &candle_core::Device::Cpu)
                .unwrap();
            let layer = QuantizedLinear::new(&weight, &bias).unwrap();
            let input = QuantizedRows::new(&rows(tokens, inputs, 3), tokens, inputs, layer.stride);
            let mut expected = vec![0i32; outputs * input.padded_tokens()];
            sums_portable(&layer.weights, layer.stride, &input.bytes, &mut expected);
            for kernel in Kernel::available() {
                let mut got = vec![0i32; outputs * input.padded_tokens()];
                kernel.run(&layer.weights, layer.stride, &input.bytes, &mut got);
                assert_eq!(got, expected, "{kernel:?} at {tokens}x{inputs}");
            }
        }
    }

    #[test]
    fn a_long_product_split_between_cores_gives_what_one_loop_gives() {
        let (tokens, inputs, outputs) = (61usize, 384, 1536);
        assert!(
            tokens.div_ceil(TOKEN_BLOCK) * TOKEN_BLOCK * outputs * inputs >= SPLIT_MULTIPLY_ADDS
        );
        let device = candle_core::Device::Cpu;
        let weight =
            Tensor::from_vec(rows(outputs, inputs, 13), (outputs, inputs), &device).unwrap();
        let bias = Tensor::from_vec(vec![0.125f32; outputs], outputs, &device).unwrap();
        let layer = QuantizedLinear::new(&weight, &bias).unwrap();
        let x = rows(tokens, inputs, 17);
        let Some(kernel) = Kernel::fast() else {
            return;
        };
        let got = layer.forward(&x, tokens, kernel);
        let input = QuantizedRows::new(&x, tokens, inputs, layer.stride);
        let mut sums = vec![0i32; outputs * input.padded_tokens()];
        sums_portable(&layer.weights, layer.stride, &input.bytes, &mut sums);
        for t in 0..tokens {
            for o in 0..outputs {
                let expected = (sums[t * outputs + o] - layer.shift_correction[o]) as f32
                    * layer.scales[o]
                    * input.scales[t]
                    + layer.bias[o];
                assert_eq!(got[t * outputs + o], expected, "token {t}, output {o}");
            }
        }
    }

    #[test]
    fn a_layer_in_bytes_stays_close_to_the_layer_in_f32() {
        let (tokens, inputs, outputs) = (5, 384, 96);
        let w = rows(outputs, inputs, 11);
        let x = rows(tokens, inputs, 5);
        let weight =
            Tensor::from_vec(w.clone(), (outputs, inputs), &candle_core::Device::Cpu).unwrap();
        let bias =
            Tensor::from_vec(vec![0.25f32; outputs], outputs, &candle_core::Device::Cpu).unwrap();
        let got = QuantizedLinear::new(&weight, &bias).unwrap().forward(
            &x,
            tokens,
            Kernel::fast().unwrap_or(Kernel::Portable),
        );
        for t in 0..tokens {
            for o in 0..outputs {
                let exact: f32 = (0..inputs)
                    .map(|i| x[t * inputs + i] * w[o * inputs + i])
                    .sum::<f32>()
                    + 0.25;
                let diff = (got[t * outputs + o] - exact).abs();
                assert!(
                    diff < 0.1,
                    "token {t}, output {o}: {} against {exact}",
                    got[t * outputs + o]
                );
            }
        }
    }
}
