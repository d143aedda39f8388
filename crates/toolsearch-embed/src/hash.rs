//! sha256 helpers: of bytes, of a file read in pieces, and as lowercase hex.

use crate::error::ModelError;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;

pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// The sha256 of everything `reader` yields, copying it to `sink` on the way.
pub(crate) fn copy_hashed(
    reader: &mut dyn Read,
    sink: &mut dyn std::io::Write,
) -> std::io::Result<[u8; 32]> {
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        sink.write_all(&buffer[..n])?;
    }
    Ok(hasher.finalize().into())
}

pub(crate) fn sha256_file(path: &Path) -> Result<[u8; 32], ModelError> {
    let mut file = std::fs::File::open(path).map_err(|e| ModelError::io(path, e))?;
    copy_hashed(&mut file, &mut std::io::sink()).map_err(|e| ModelError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest() {
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
