//! Batches run side by side, one per core on a one-thread pool each, while a lone text's products
//! are split across the shared pool (`RAYON_NUM_THREADS=2 CANDLE_NUM_THREADS=1`, as the CLI sets
//! them on two cores): the vectors and their order must be those of one text at a time. A binary
//! of its own, because the variables are read by every product in the process.

use super::peers;

use toolsearch_embed::{BertEmbedder, Embedder};

#[test]
fn batches_on_several_threads_keep_vectors_and_order() {
    std::env::set_var("RAYON_NUM_THREADS", "2");
    std::env::set_var("CANDLE_NUM_THREADS", "1");
    let Some(dir) = peers::model_or_skip("batches_on_several_threads_keep_vectors_and_order")
    else {
        return;
    };
    // Two texts a batch, so twelve texts make batches for every thread.
    let model = BertEmbedder::load(&dir)
        .expect("the model loads")
        .with_batch_limits(2, 512);
    let texts: Vec<String> = (0..12)
        .map(|i| format!("tool number {i} {}", "reads files and folders ".repeat(i)))
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let together = model.embed(&refs).expect("embeds");
    assert_eq!(together.len(), texts.len());
    for (text, vector) in refs.iter().zip(&together) {
        let alone = model.embed(&[text]).expect("embeds").remove(0);
        let diff = vector
            .iter()
            .zip(&alone)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(diff < 1e-4, "`{text}`: differs by {diff} from itself alone");
    }
}
