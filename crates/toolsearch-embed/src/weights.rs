//! Some tensors of a safetensors file, read in one pass that hashes the whole file, so that what
//! is built is exactly the bytes whose hash was checked, and no buffer of the whole file is held.

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

/// A header larger than this is not a model's: safetensors itself refuses over 100 MB.
const MAX_HEADER: u64 = 100 << 20;

#[derive(Deserialize)]
struct Info {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: (usize, usize),
}

/// The sha256 of the file at `path`, and its tensors whose names `keep` accepts.
pub(crate) fn read_tensors(
    path: &Path,
    keep: impl Fn(&str) -> bool,
    device: &Device,
) -> Result<([u8; 32], HashMap<String, Tensor>), String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut reader = Hashing {
        inner: std::io::BufReader::with_capacity(1 << 20, file),
        hasher: Sha256::new(),
    };
    let mut length = [0u8; 8];
    reader.read_exact(&mut length).map_err(|e| e.to_string())?;
    let length = u64::from_le_bytes(length);
    if length > MAX_HEADER {
        return Err(format!(
            "a header of {length} bytes is not a safetensors file's"
        ));
    }
    let mut header = vec![0u8; length as usize];
    reader.read_exact(&mut header).map_err(|e| e.to_string())?;
    let mut entries: Vec<(String, Info)> =
        serde_json::from_slice::<HashMap<String, serde_json::Value>>(&header)
            .map_err(|e| format!("its header: {e}"))?
            .into_iter()
            .filter(|(name, _)| name != "__metadata__")
            .map(|(name, info)| {
                serde_json::from_value::<Info>(info)
                    .map(|info| (name.clone(), info))
                    .map_err(|e| format!("tensor {name}: {e}"))
            })
            .collect::<Result<_, _>>()?;
    entries.sort_by_key(|(_, info)| info.data_offsets);
    let mut at = 0;
    let mut tensors = HashMap::new();
    for (name, info) in entries {
        let (start, end) = info.data_offsets;
        if start < at || end < start {
            return Err(format!("tensor {name}: its bytes overlap another's"));
        }
        skip(&mut reader, start - at).map_err(|e| e.to_string())?;
        at = end;
        // A type candle has no name for is left out: an encoder that needs the tensor says so.
        let dtype = dtype_of(&info.dtype).filter(|_| keep(&name));
        let Some(dtype) = dtype else {
            skip(&mut reader, end - start).map_err(|e| e.to_string())?;
            continue;
        };
        let mut bytes = vec![0u8; end - start];
        reader.read_exact(&mut bytes).map_err(|e| e.to_string())?;
        let tensor = Tensor::from_raw_buffer(&bytes, dtype, &info.shape, device)
            .map_err(|e| format!("tensor {name}: {e}"))?;
        tensors.insert(name, tensor);
    }
    // The rest of the file (nothing, in a well-formed one) is hashed too.
    skip(&mut reader, usize::MAX).map_err(|e| e.to_string())?;
    Ok((reader.hasher.finalize().into(), tensors))
}

fn dtype_of(name: &str) -> Option<DType> {
    Some(match name {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "F64" => DType::F64,
        "I64" => DType::I64,
        "U32" => DType::U32,
        "U8" => DType::U8,
        _ => return None,
    })
}

/// Reads and drops `count` bytes, or up to the end of the file.
fn skip(reader: &mut impl Read, count: usize) -> std::io::Result<()> {
    std::io::copy(
        &mut reader.take(u64::try_from(count).unwrap_or(u64::MAX)),
        &mut std::io::sink(),
    )?;
    Ok(())
}

/// A reader that hashes what it reads.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file of `tensors` (name, shape, f32 values), written as the format says.
    fn file(tensors: &[(&str, Vec<usize>, Vec<f32>)]) -> Vec<u8> {
        let mut header = serde_json::Map::new();
        let mut data = Vec::new();
        for (name, shape, values) in tensors {
            let start = data.len();
            data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
            header.insert(
                name.to_string(),
                serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [start, data.len()]}),
            );
        }
        header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
        let header = serde_json::to_vec(&header).unwrap();
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend(header);
        out.extend(data);
        out
    }

    #[test]
    fn the_kept_tensors_and_the_whole_files_hash() {
        let bytes = file(&[
            ("a", vec![2], vec![1.0, 2.0]),
            ("skipped", vec![3], vec![7.0, 8.0, 9.0]),
            ("b", vec![1, 2], vec![3.0, 4.0]),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        std::fs::write(&path, &bytes).unwrap();
        let (hash, tensors) = read_tensors(&path, |name| name != "skipped", &Device::Cpu).unwrap();
        assert_eq!(hash, crate::hash::sha256(&bytes));
        assert_eq!(tensors.len(), 2);
        assert_eq!(tensors["a"].to_vec1::<f32>().unwrap(), [1.0, 2.0]);
        assert_eq!(tensors["b"].to_vec2::<f32>().unwrap(), [[3.0, 4.0]]);

        let mut cut = bytes.clone();
        cut.truncate(bytes.len() - 4);
        std::fs::write(&path, &cut).unwrap();
        assert!(read_tensors(&path, |_| true, &Device::Cpu).is_err());
        std::fs::write(&path, b"\xff\xff\xff\xff\xff\xff\xff\xff{}").unwrap();
        let error = read_tensors(&path, |_| true, &Device::Cpu).unwrap_err();
        assert!(error.contains("header"), "{error}");
    }
}
