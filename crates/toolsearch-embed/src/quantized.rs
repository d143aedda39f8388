//! The encoder for one short text (a query) with its dense layers in 8-bit integers.
//!
//! A query is a few dozen tokens, so its matrix products are thin: each weight is used a
//! handful of times per read. In f32 that is bound by reading the layers' 42 MB of weights and
//! by a general matrix library's per-product set-up; in bytes the weights are a quarter of that,
//! one `vpdpbusd` does 32 (AVX-VNNI) or 64 (AVX-512 VNNI) multiply-adds and one AMX `tdpbusd`
//! 16 Ki; plain AVX2 needs three instructions for 32 (`vpsignb`, `vpmaddubsw`, `vpmaddwd`),
//! still faster than f32. Used where the CPU has one of them ([`Kernel::fast`]); elsewhere
//! queries run in f32 like every text.
//!
//! - Weights: each output row scaled so its largest magnitude is 127 and rounded (per row, once
//!   at load), then laid out for the kernel. Activations: each token's inputs scaled the same
//!   way when the layer runs, then shifted by 128 into unsigned bytes (what `vpdpbusd` and
//!   `tdpbusd` multiply); the shift is taken back out exactly with each row's sum of weights
//!   (the AVX2 kernel unshifts the bytes instead). The integer sums are exact, so every kernel
//!   gives the same vector.
//! - Everything else (embeddings, attention, layer norms, GELU, pooling) stays f32; attention's
//!   two products per head go to `gemm`, the library candle's own products run on.
//! - With AMX a query runs on the caller's thread: its products are bound by reading the
//!   weights once. With VNNI or AVX2 a short query runs on one core too, and a long one's
//!   larger products are split by token blocks between two (`rayon::join`, the whole query
//!   running inside the pool so that the split costs no wake-up of the caller).

use crate::encoder::{gelu_in_place, Config, HiddenAct};
use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

/// Inputs are padded to a multiple of this many bytes (one 512-bit register, two 256-bit ones).
const LANE_BYTES: usize = 64;

/// Tokens the VNNI kernels compute together against one weight row (AMX pads to its tiles'
/// 16 rows instead: [`Kernel::token_block`]).
const TOKEN_BLOCK: usize = 4;

/// A dense layer with 8-bit weights, laid out for the kernel that multiplies them.
struct QuantizedLinear {
    outputs: usize,
    inputs: usize,
    /// `inputs` rounded up to [`LANE_BYTES`]; the padding weights are 0.
    stride: usize,
    /// `outputs` rounded up to the kernel's [`Kernel::output_block`]; the padding rows are 0.
    rows: usize,
    kernel: Kernel,
    /// `rows × stride` bytes in the order [`Kernel::pack`] gives.
    weights: Vec<i8>,
    scales: Vec<f32>,
    /// 128 × the row's weight sum (`rows` of them, 0 for the padding): what the activations'
    /// shift adds to each row's sum in a kernel that multiplies the shifted bytes.
    shift_correction: Vec<i32>,
    bias: Vec<f32>,
}

impl QuantizedLinear {
    /// From candle's `(outputs, inputs)` weight and `(outputs)` bias, for `kernel`.
    fn new(weight: &Tensor, bias: &Tensor, kernel: Kernel) -> Result<Self> {
        let (outputs, inputs) = weight.dims2()?;
        let weight_rows = weight.to_vec2::<f32>()?;
        let bias = bias.to_vec1::<f32>()?;
        if bias.len() != outputs {
            return Err(candle_core::Error::Msg(format!(
                "a dense layer has {outputs} outputs but {} biases",
                bias.len()
            )));
        }
        let stride = inputs.div_ceil(LANE_BYTES) * LANE_BYTES;
        let rows = outputs.div_ceil(kernel.output_block()) * kernel.output_block();
        let mut weights = vec![0i8; rows * stride];
        let mut scales = Vec::with_capacity(outputs);
        let mut shift_correction = vec![0; rows];
        for ((row, out), correction) in weight_rows
            .iter()
            .zip(weights.chunks_exact_mut(stride))
            .zip(&mut shift_correction)
        {
            let scale = quantize_into(row, out);
            scales.push(scale);
            *correction = 128 * out.iter().map(|&w| i32::from(w)).sum::<i32>();
        }
        Ok(Self {
            outputs,
            inputs,
            stride,
            rows,
            kernel,
            weights: kernel.pack(weights, stride),
            scales,
            shift_correction,
            bias,
        })
    }

    /// `input` in bytes for this layer: padded to its stride and its kernel's token block.
    #[inline(always)]
    fn quantize(&self, input: &[f32], tokens: usize) -> QuantizedRows {
        QuantizedRows::new(
            input,
            tokens,
            self.inputs,
            self.stride,
            self.kernel.token_block(),
        )
    }

    /// The integer sums of every (padded) token's values (±127) with every (padded) row:
    /// `padded tokens × rows`, the same from every kernel.
    #[inline(always)]
    fn sums(&self, quantized: &QuantizedRows) -> Vec<i32> {
        let padded = quantized.padded_tokens();
        let mut sums = vec![0i32; padded * self.rows];
        let block = self.kernel.token_block();
        let blocks = padded / block;
        if blocks >= 2
            && self
                .kernel
                .split_from()
                .is_some_and(|from| padded * self.rows * self.stride >= from)
        {
            // A long text's product: half its token blocks on another core.
            let half = blocks / 2 * block;
            let (bytes_a, bytes_b) = quantized.bytes.split_at(half * self.stride);
            let (sums_a, sums_b) = sums.split_at_mut(half * self.rows);
            rayon::join(
                || self.kernel.run(&self.weights, self.stride, bytes_a, sums_a),
                || self.kernel.run(&self.weights, self.stride, bytes_b, sums_b),
            );
        } else {
            self.kernel
                .run(&self.weights, self.stride, &quantized.bytes, &mut sums);
        }
        if self.kernel.multiplies_shifted_bytes() {
            let corrections = &self.shift_correction[..self.rows];
            for row in sums.chunks_exact_mut(self.rows) {
                for o in 0..row.len() {
                    row[o] -= corrections[o];
                }
            }
        }
        sums
    }

    /// `input` is `tokens × inputs`, row-major; returns `tokens × outputs`.
    #[inline(always)]
    fn forward(&self, input: &[f32], tokens: usize) -> Vec<f32> {
        let quantized = self.quantize(input, tokens);
        let sums = self.sums(&quantized);
        let (outputs, rows) = (self.outputs, self.rows);
        let mut out = vec![0f32; tokens * outputs];
        let (scales, biases) = (&self.scales[..outputs], &self.bias[..outputs]);
        for t in 0..tokens {
            let token_scale = quantized.scales[t];
            let sums = &sums[t * rows..][..outputs];
            let row = &mut out[t * outputs..][..outputs];
            for o in 0..outputs {
                row[o] = sums[o] as f32 * scales[o] * token_scale + biases[o];
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

/// The same for the AVX2 kernel, whose products take about twice as long: splitting from
/// 4 Mi multiply-adds gave p50 8.9–9.2 ms against 10.9–11.2 ms from 16 Mi (two alternating
/// pairs of `query_latency --quantized`, p99 level).
const SPLIT_MULTIPLY_ADDS_AVX2: usize = 4 << 20;

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
/// the byte for 0 (128) to the layer's stride and to a whole block of tokens.
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
    fn new(input: &[f32], tokens: usize, inputs: usize, stride: usize, block: usize) -> Self {
        let padded_tokens = tokens.div_ceil(block) * block;
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
/// only where the CPU has byte products in vectors ([`Kernel::fast`]): the portable loop
/// costs more than the f32 products it replaces (5 against 135 GMAC/s measured on a CPU with
/// AVX-VNNI), so without AVX2 the model runs in f32 instead. The portable loop is the
/// reference the others are tested against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    #[cfg_attr(not(test), allow(dead_code))]
    Portable,
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    Amx,
}

impl Kernel {
    /// The fastest byte multiply-add this CPU has, if any: AMX's tile products, else AVX-VNNI
    /// (256-bit), else AVX-512 VNNI (which measured no faster, at twice the width), else
    /// AVX2's three instructions (on a CPU with nothing else, queries p50 about 9 against
    /// 16–19 ms in f32).
    fn fast() -> Option<Self> {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        if amx::ready() {
            return Some(Self::Amx);
        }
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("avxvnni") {
                return Some(Self::AvxVnni);
            }
            if has!("avx512f") && has!("avx512vnni") {
                return Some(Self::Avx512Vnni);
            }
            if has!("avx2") {
                return Some(Self::Avx2);
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
            if has!("avx2") {
                kernels.push(Self::Avx2);
            }
        }
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        if amx::ready() {
            kernels.push(Self::Amx);
        }
        kernels
    }

    /// Tokens are padded to a multiple of this.
    fn token_block(self) -> usize {
        match self {
            #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
            Self::Amx => amx::TILE_ROWS,
            _ => TOKEN_BLOCK,
        }
    }

    /// A layer's outputs are padded to a multiple of this.
    fn output_block(self) -> usize {
        match self {
            #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
            Self::Amx => amx::OUTPUT_BLOCK,
            _ => 1,
        }
    }

    /// The multiply-adds from which a product's token blocks are split between two cores, if
    /// ever. Not AMX's: its products are bound by reading the weights once, which one core
    /// does as fast as two.
    fn split_from(self) -> Option<usize> {
        match self {
            #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
            Self::Amx => None,
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => Some(SPLIT_MULTIPLY_ADDS_AVX2),
            _ => Some(SPLIT_MULTIPLY_ADDS),
        }
    }

    /// Whether `run` gives the sums of the shifted bytes (`u8`, 128 for 0), from which the
    /// shift is then taken out, rather than of the values themselves.
    fn multiplies_shifted_bytes(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => false,
            _ => true,
        }
    }

    /// The weights (`rows × stride`, one output row after another) in the order `run` reads.
    fn pack(self, weights: Vec<i8>, stride: usize) -> Vec<i8> {
        match self {
            #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
            Self::Amx => amx::pack(&weights, stride),
            _ => weights,
        }
    }

    /// Every token of `input` (`padded tokens × stride` bytes) with every row of `weights`
    /// (packed by [`Self::pack`]) into `out` (`padded tokens × rows`).
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
            #[cfg(target_arch = "x86_64")]
            #[allow(unsafe_code)]
            // SAFETY: chosen only when the CPU has AVX2 (checked in `fast` and `available`).
            Self::Avx2 => unsafe { avx2::sums(weights, stride, input, out) },
            #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
            #[allow(unsafe_code)]
            // SAFETY: chosen only when the CPU has AMX's byte products and this process may use
            // its tiles (`amx::ready`, checked in `fast` and `available`).
            Self::Amx => unsafe { amx::sums(weights, stride, input, out) },
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

/// A vector kernel's tokens (padded), rows and steps of `lane` bytes, asserting the bounds
/// its loads rely on: whole steps, whole blocks of four tokens, room for every sum.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn shape(
    weights: &[i8],
    stride: usize,
    input: &[u8],
    out: &[i32],
    lane: usize,
) -> (usize, usize, usize) {
    let padded = input.len() / stride;
    let rows = weights.len() / stride;
    assert!(
        stride.is_multiple_of(lane)
            && out.len() >= rows * padded
            && input.len() == padded * stride
            && padded.is_multiple_of(4)
    );
    (padded, rows, stride / lane)
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
            let (padded, rows, lanes) = super::shape(weights, stride, input, out, LANE);
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

    /// The sum of `v`'s eight lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn horizontal_sum(v: __m256i) -> i32 {
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

/// AVX2 without a byte multiply-add of its own: `vpmaddubsw` multiplies unsigned by signed
/// bytes into 16-bit sums of pairs, which the shifted activations would overflow (2 × 255 ×
/// 127). So this kernel multiplies each activation's magnitude (at most 127) by the weight
/// carrying the activation's sign (`vpsignb`): a pair then sums to at most 2 × 127 × 127 =
/// 32,258, exact in 16 bits, and `vpmaddwd` by ones widens pairs of those into 32-bit sums.
/// Its sums are of the values themselves, not of the shifted bytes.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::vnni::horizontal_sum;
    use std::arch::x86_64::{
        _mm256_add_epi32, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_maddubs_epi16,
        _mm256_set1_epi16, _mm256_setzero_si256, _mm256_sign_epi8,
    };

    const LANE: usize = 32;

    /// As the other kernels' `sums`, with `input` in shifted bytes, but summing the values.
    #[target_feature(enable = "avx2")]
    #[allow(clippy::needless_range_loop)]
    pub(super) fn sums(weights: &[i8], stride: usize, input: &[u8], out: &mut [i32]) {
        let (padded, rows, lanes) = super::shape(weights, stride, input, out, LANE);
        // Each activation as a signed byte and as its magnitude, once for every row.
        // (Loops, not iterator adapters: the closures would not be compiled for AVX2.)
        let mut signed = vec![0u8; input.len()];
        let mut magnitudes = vec![0u8; input.len()];
        for i in 0..input.len() {
            signed[i] = input[i] ^ 0x80;
            magnitudes[i] = (signed[i] as i8).unsigned_abs();
        }
        let ones = _mm256_set1_epi16(1);
        // Row pairs outermost: a pair's weights stay in the first-level cache while every
        // block of tokens passes, so each weight is read from memory once per product.
        let mut r = 0;
        while r < rows {
            // Two rows, or the last one alone (its partner's sums are dropped).
            let pair = r + 1 < rows;
            let first = weights[r * stride..].as_ptr();
            let second = weights[(if pair { r + 1 } else { r }) * stride..].as_ptr();
            for t in (0..padded).step_by(4) {
                let a = signed[t * stride..].as_ptr();
                let m = magnitudes[t * stride..].as_ptr();
                let mut acc = [_mm256_setzero_si256(); 8];
                for c in 0..lanes {
                    let at = c * LANE;
                    #[allow(unsafe_code)]
                    // SAFETY: `at + LANE <= stride`; rows `r` and `r + 1` (or `r` again) lie
                    // in `weights`, tokens `t..t + 4` in `signed` and `magnitudes`, each of
                    // `input`'s length.
                    unsafe {
                        let w0 = _mm256_loadu_si256(first.add(at).cast());
                        let w1 = _mm256_loadu_si256(second.add(at).cast());
                        // Token `i` against both rows into `acc[i]` and `acc[4 + i]`.
                        macro_rules! token {
                            ($i:literal) => {
                                let sign = _mm256_loadu_si256(a.add($i * stride + at).cast());
                                let magnitude = _mm256_loadu_si256(m.add($i * stride + at).cast());
                                let p0 =
                                    _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(w0, sign));
                                let p1 =
                                    _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(w1, sign));
                                acc[$i] = _mm256_add_epi32(acc[$i], _mm256_madd_epi16(p0, ones));
                                acc[4 + $i] =
                                    _mm256_add_epi32(acc[4 + $i], _mm256_madd_epi16(p1, ones));
                            };
                        }
                        token!(0);
                        token!(1);
                        token!(2);
                        token!(3);
                    }
                }
                for (i, &a) in acc[..4].iter().enumerate() {
                    out[(t + i) * rows + r] = horizontal_sum(a);
                }
                if pair {
                    for (i, &a) in acc[4..].iter().enumerate() {
                        out[(t + i) * rows + r + 1] = horizontal_sum(a);
                    }
                }
            }
            r += 2;
        }
    }
}

/// AMX: eight tile registers of 16 rows × 64 bytes, and `tdpbusd`, which multiplies a tile of
/// 16 tokens × 64 input bytes by a tile of 64 inputs × 16 outputs (four inputs of each output
/// per row) into 16 × 16 sums: 16 Ki multiply-adds in one instruction. A query's product is
/// then bound by reading its weights, once per 32 tokens (two token tiles at a time) where the
/// VNNI kernels read them once per four.
///
/// The tiles are driven by `asm!` (AMX's intrinsics are not stable Rust): tmm0–tmm3 hold sums,
/// tmm4–tmm5 tokens, tmm6–tmm7 weights. Nothing else in the program touches the tile
/// registers, so they keep their values from one `asm!` block to the next within a call of
/// `sums`, which loads the tile configuration first and releases the tiles last.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx {
    use std::arch::asm;
    use std::sync::OnceLock;

    /// Rows of a tile: tokens in a token tile, groups of four inputs in a weight tile.
    pub(super) const TILE_ROWS: usize = 16;
    /// Bytes in a tile's row: one step of 64 inputs.
    const TILE_BYTES: usize = 64;
    /// Outputs in a weight tile (four bytes each per row).
    const TILE_OUTPUTS: usize = TILE_BYTES / 4;
    /// Outputs computed together: two weight tiles.
    pub(super) const OUTPUT_BLOCK: usize = 2 * TILE_OUTPUTS;
    const TILE_SIZE: usize = TILE_ROWS * TILE_BYTES;
    const _: () = assert!(super::LANE_BYTES == TILE_BYTES && TILE_ROWS * 4 == TILE_BYTES);

    /// Whether this CPU has AMX's tiles and byte products, with tiles of at least 16 rows of
    /// 64 bytes, and Linux lets this process use them: asked once, with
    /// `arch_prctl(ARCH_REQ_XCOMP_PERM)`, which the kernel refuses where it could not save the
    /// tiles (an alternate signal stack too small for them, say).
    pub(super) fn ready() -> bool {
        static READY: OnceLock<bool> = OnceLock::new();
        *READY.get_or_init(|| has_tiles() && permitted())
    }

    fn has_tiles() -> bool {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        const AMX_TILE_AND_INT8: u32 = 0b11 << 24;
        // Leaf 7: the features; leaf 0x1D sub-leaf 1: palette 1's tiles.
        if __cpuid(0).eax < 0x1d || __cpuid_count(7, 0).edx & AMX_TILE_AND_INT8 != AMX_TILE_AND_INT8
        {
            return false;
        }
        if __cpuid_count(0x1d, 0).eax < 1 {
            return false;
        }
        let palette = __cpuid_count(0x1d, 1);
        let (tiles, bytes_per_row, rows) = (
            palette.ebx >> 16,
            palette.ebx & 0xffff,
            palette.ecx & 0xffff,
        );
        tiles >= 8 && bytes_per_row as usize >= TILE_BYTES && rows as usize >= TILE_ROWS
    }

    fn permitted() -> bool {
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        #[allow(unsafe_code)]
        // SAFETY: a request for a permission; it reads and writes none of our memory.
        let answer = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        answer == 0
    }

    /// Row-major weights (`rows × stride`, `rows` a multiple of [`TILE_OUTPUTS`]) as weight
    /// tiles: for each 16 outputs, for each 64 inputs, one tile whose row `k` holds inputs
    /// `4k..4k + 4` of each of the 16 outputs in turn.
    pub(super) fn pack(weights: &[i8], stride: usize) -> Vec<i8> {
        let mut packed = Vec::with_capacity(weights.len());
        for outputs in weights.chunks_exact(TILE_OUTPUTS * stride) {
            for step in (0..stride).step_by(TILE_BYTES) {
                for group in (step..step + TILE_BYTES).step_by(4) {
                    for output in outputs.chunks_exact(stride) {
                        packed.extend_from_slice(&output[group..group + 4]);
                    }
                }
            }
        }
        packed
    }

    /// The tile configuration: palette 1, each of the eight tiles 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct Config([u8; 64]);

    impl Config {
        fn full_tiles() -> Self {
            let mut bytes = [0u8; 64];
            bytes[0] = 1;
            for tile in 0..8 {
                bytes[16 + 2 * tile] = TILE_BYTES as u8;
                bytes[48 + tile] = TILE_ROWS as u8;
            }
            Self(bytes)
        }
    }

    /// As the other kernels' `sums`, with `weights` packed by [`pack`].
    ///
    /// # Safety
    ///
    /// The CPU has AMX-TILE and AMX-INT8 and this process may use them ([`ready`]).
    #[allow(unsafe_code)]
    pub(super) unsafe fn sums(weights: &[i8], stride: usize, input: &[u8], out: &mut [i32]) {
        let padded = input.len() / stride;
        let rows = weights.len() / stride;
        let steps = stride / TILE_BYTES;
        assert!(
            stride.is_multiple_of(TILE_BYTES)
                && rows.is_multiple_of(OUTPUT_BLOCK)
                && weights.len() == rows * stride
                && input.len() == padded * stride
                && padded.is_multiple_of(TILE_ROWS)
                && out.len() >= padded * rows
        );
        let config = Config::full_tiles();
        let (x, w, o) = (input.as_ptr(), weights.as_ptr(), out.as_mut_ptr());
        // Bytes from one token's row to the next: in the input, in the sums.
        let (x_step, o_step) = (stride, rows * 4);
        // SAFETY (for every block below): the tiles are configured before their first use and
        // released after the last; each load reads 16 rows of 64 bytes at its step, each store
        // writes 16 rows of 16 sums at its step, and the bounds asserted above keep every one
        // of those rows within `input`, `weights` or `out` (tokens `t..t + 16` or `t..t + 32`
        // below `padded`; outputs `16 · column..16 · column + 32` below `rows`; inputs of a
        // step below `stride`).
        unsafe {
            asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly, preserves_flags));
            for column in (0..rows / TILE_OUTPUTS).step_by(2) {
                let weights_of =
                    |column: usize, step: usize| w.add((column * steps + step) * TILE_SIZE);
                let sums_at = |t: usize, column: usize| o.add(t * rows + column * TILE_OUTPUTS);
                let mut t = 0;
                while t + 2 * TILE_ROWS <= padded {
                    asm!(
                        "tilezero tmm0",
                        "tilezero tmm1",
                        "tilezero tmm2",
                        "tilezero tmm3",
                        options(nomem, nostack, preserves_flags)
                    );
                    for step in 0..steps {
                        asm!(
                            "tileloadd tmm4, [{x0} + {x_step}*1]",
                            "tileloadd tmm5, [{x1} + {x_step}*1]",
                            "tileloadd tmm6, [{w0} + {w_step}*1]",
                            "tileloadd tmm7, [{w1} + {w_step}*1]",
                            "tdpbusd tmm0, tmm4, tmm6",
                            "tdpbusd tmm1, tmm4, tmm7",
                            "tdpbusd tmm2, tmm5, tmm6",
                            "tdpbusd tmm3, tmm5, tmm7",
                            x0 = in(reg) x.add(t * stride + step * TILE_BYTES),
                            x1 = in(reg) x.add((t + TILE_ROWS) * stride + step * TILE_BYTES),
                            x_step = in(reg) x_step,
                            w0 = in(reg) weights_of(column, step),
                            w1 = in(reg) weights_of(column + 1, step),
                            w_step = in(reg) TILE_BYTES,
                            options(nostack, readonly, preserves_flags),
                        );
                    }
                    asm!(
                        "tilestored [{s00} + {o_step}*1], tmm0",
                        "tilestored [{s01} + {o_step}*1], tmm1",
                        "tilestored [{s10} + {o_step}*1], tmm2",
                        "tilestored [{s11} + {o_step}*1], tmm3",
                        s00 = in(reg) sums_at(t, column),
                        s01 = in(reg) sums_at(t, column + 1),
                        s10 = in(reg) sums_at(t + TILE_ROWS, column),
                        s11 = in(reg) sums_at(t + TILE_ROWS, column + 1),
                        o_step = in(reg) o_step,
                        options(nostack, preserves_flags),
                    );
                    t += 2 * TILE_ROWS;
                }
                if t < padded {
                    // The last 16 tokens alone.
                    asm!(
                        "tilezero tmm0",
                        "tilezero tmm1",
                        options(nomem, nostack, preserves_flags)
                    );
                    for step in 0..steps {
                        asm!(
                            "tileloadd tmm4, [{x0} + {x_step}*1]",
                            "tileloadd tmm6, [{w0} + {w_step}*1]",
                            "tileloadd tmm7, [{w1} + {w_step}*1]",
                            "tdpbusd tmm0, tmm4, tmm6",
                            "tdpbusd tmm1, tmm4, tmm7",
                            x0 = in(reg) x.add(t * stride + step * TILE_BYTES),
                            x_step = in(reg) x_step,
                            w0 = in(reg) weights_of(column, step),
                            w1 = in(reg) weights_of(column + 1, step),
                            w_step = in(reg) TILE_BYTES,
                            options(nostack, readonly, preserves_flags),
                        );
                    }
                    asm!(
                        "tilestored [{s00} + {o_step}*1], tmm0",
                        "tilestored [{s01} + {o_step}*1], tmm1",
                        s00 = in(reg) sums_at(t, column),
                        s01 = in(reg) sums_at(t, column + 1),
                        o_step = in(reg) o_step,
                        options(nostack, preserves_flags),
                    );
                }
            }
            asm!("tilerelease", options(nomem, nostack, preserves_flags));
        }
    }
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
                kernel,
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
                let qkv = QuantizedLinear::new(
                    &Tensor::cat(&weights, 0)?,
                    &Tensor::cat(&biases, 0)?,
                    kernel,
                )?;
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

    /// What computes the dense layers' products, in words (for the logs).
    pub(crate) fn products(&self) -> &'static str {
        match self.kernel {
            Kernel::Portable => "byte products in portable code",
            #[cfg(target_arch = "x86_64")]
            Kernel::AvxVnni => "byte products by AVX-VNNI",
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Vnni => "byte products by AVX-512 VNNI",
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => "byte products by AVX2",
            #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
            Kernel::Amx => "byte products by AMX tiles",
        }
    }

    /// The word embeddings (vocabulary × hidden size), shared with the f32 encoder.
    pub(crate) fn words(&self) -> &Tensor {
        &self.words
    }

    /// Whether a long text's products are split between two cores ([`Kernel::split_from`]), so
    /// that [`Self::pooled`] is best run inside the rayon pool.
    pub(crate) fn splits_products(&self) -> bool {
        self.kernel.split_from().is_some()
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
        let qkv = layer.qkv.forward(hidden, tokens);
        let context = self.attention(&qkv, tokens);
        let mut attended = layer.attention_output.forward(&context, tokens);
        add_into(&mut attended, hidden);
        layer.attention_norm.apply(&mut attended);
        let mut inner = layer.intermediate.forward(&attended, tokens);
        match self.activation {
            HiddenAct::Gelu => gelu_in_place(&mut inner),
            HiddenAct::GeluApproximate => inner.iter_mut().for_each(|x| {
                let c = (2.0 / std::f32::consts::PI).sqrt();
                *x = 0.5 * *x * (1.0 + (c * (*x + 0.044_715 * *x * *x * *x)).tanh());
            }),
            HiddenAct::Relu => inner.iter_mut().for_each(|x| *x = x.max(0.0)),
        }
        let mut out = layer.output.forward(&inner, tokens);
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

    fn layer(
        outputs: usize,
        inputs: usize,
        seed: u32,
        bias: f32,
        kernel: Kernel,
    ) -> QuantizedLinear {
        let device = candle_core::Device::Cpu;
        let weight =
            Tensor::from_vec(rows(outputs, inputs, seed), (outputs, inputs), &device).unwrap();
        let bias = Tensor::from_vec(vec![bias; outputs], outputs, &device).unwrap();
        QuantizedLinear::new(&weight, &bias, kernel).unwrap()
    }

    #[test]
    fn every_kernel_gives_the_same_integer_sums() {
        for (tokens, inputs, outputs) in [
            (1, 384, 64),
            (7, 384, 70),
            (13, 1536, 33),
            (4, 40, 3),
            (16, 64, 32),
            (40, 384, 96),
        ] {
            let x = rows(tokens, inputs, 3);
            let reference = layer(outputs, inputs, 7, 0.5, Kernel::Portable);
            let expected = reference.sums(&reference.quantize(&x, tokens));
            for kernel in Kernel::available() {
                let layer = layer(outputs, inputs, 7, 0.5, kernel);
                let got = layer.sums(&layer.quantize(&x, tokens));
                for t in 0..tokens {
                    assert_eq!(
                        got[t * layer.rows..][..outputs],
                        expected[t * reference.rows..][..outputs],
                        "{kernel:?} at {tokens}x{inputs}, token {t}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_long_product_split_between_cores_gives_what_one_loop_gives() {
        let (tokens, inputs, outputs) = (61usize, 384, 1536);
        assert!(
            tokens.div_ceil(TOKEN_BLOCK) * TOKEN_BLOCK * outputs * inputs >= SPLIT_MULTIPLY_ADDS
        );
        let x = rows(tokens, inputs, 17);
        let reference = layer(outputs, inputs, 13, 0.125, Kernel::Portable);
        let input = reference.quantize(&x, tokens);
        let sums = reference.sums(&input);
        for kernel in Kernel::available() {
            let got = layer(outputs, inputs, 13, 0.125, kernel).forward(&x, tokens);
            for t in 0..tokens {
                for o in 0..outputs {
                    let expected =
                        sums[t * outputs + o] as f32 * reference.scales[o] * input.scales[t]
                            + reference.bias[o];
                    assert_eq!(
                        got[t * outputs + o],
                        expected,
                        "{kernel:?}: token {t}, output {o}"
                    );
                }
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
        let got = QuantizedLinear::new(&weight, &bias, Kernel::fast().unwrap_or(Kernel::Portable))
            .unwrap()
            .forward(&x, tokens);
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
