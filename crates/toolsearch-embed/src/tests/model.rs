//! The real model: parity with the reference implementation, batching, truncation, identity.
//! Needs the model files (scripts/test.sh installs them into `.test-peers/model`); without them
//! these tests are skipped, or fail under `TOOLSEARCH_REQUIRE_MODEL=1`.

use super::peers;

use std::path::PathBuf;
use std::sync::OnceLock;
use toolsearch_core::embed::{dot, embedding_text, VectorSet};
use toolsearch_core::Tool;
use toolsearch_embed::{model_identity, verify_default_model, BertEmbedder, Embedder};

/// One model for all tests of this binary (loading costs a few hundred milliseconds).
fn model(test: &str) -> Option<&'static BertEmbedder> {
    static MODEL: OnceLock<Option<(PathBuf, BertEmbedder)>> = OnceLock::new();
    let dir = peers::model_or_skip(test)?;
    let loaded = MODEL.get_or_init(|| {
        let embedder = BertEmbedder::load(&dir)
            .unwrap_or_else(|e| panic!("the model at {} loads: {e}", dir.display()));
        Some((dir, embedder))
    });
    loaded.as_ref().map(|(_, m)| m)
}

fn embed_one(model: &BertEmbedder, text: &str) -> Vec<f32> {
    model.embed(&[text]).expect("embeds").remove(0)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn parity_with_the_reference_model() {
    let Some(model) = model("parity_with_the_reference_model") else {
        return;
    };
    // sentence-transformers' all-MiniLM-L6-v2 gives these first five values for this sentence.
    let reference = [0.039452f32, 0.049227, 0.009736, -0.017072, 0.068684];
    let vector = embed_one(model, "send an email to a colleague");
    assert_eq!(vector.len(), 384);
    assert_eq!(model.dimensions(), 384);
    for (i, (got, want)) in vector.iter().zip(reference).enumerate() {
        assert!(
            (got - want).abs() < 1e-4,
            "value {i}: got {got}, the reference model gives {want} (vector starts {:?})",
            &vector[..5]
        );
    }
    assert!((dot(&vector, &vector) - 1.0).abs() < 1e-4, "L2-normalised");
}

#[test]
fn a_batch_gives_the_same_vectors_as_one_text_at_a_time() {
    let Some(model) = model("a_batch_gives_the_same_vectors_as_one_text_at_a_time") else {
        return;
    };
    // Different lengths, so the batch is padded: padding must not change any vector.
    let texts = [
        "weather",
        "send an email to a colleague",
        "create a calendar event for next Tuesday at noon with the whole design team and a room",
        "send an email to a colleague",
        "",
    ];
    let batch = model.embed(&texts).expect("embeds");
    assert_eq!(batch.len(), texts.len());
    for (text, vector) in texts.iter().zip(&batch) {
        let alone = embed_one(model, text);
        assert!(
            max_diff(vector, &alone) < 1e-4,
            "`{text}`: batched and alone differ by {}",
            max_diff(vector, &alone)
        );
    }
    assert_eq!(batch[1], batch[3]);
}

#[test]
fn long_texts_are_truncated_to_256_tokens() {
    let Some(model) = model("long_texts_are_truncated_to_256_tokens") else {
        return;
    };
    assert_eq!(model.max_tokens(), 256);
    let long = "the quick brown fox jumps over the lazy dog ".repeat(60); // ~540 tokens
    let a = embed_one(model, &long);
    let b = embed_one(
        model,
        &format!("{long} and then sends an urgent invoice reminder"),
    );
    // Everything past the first 256 tokens is cut, so the tail changes nothing.
    assert!(max_diff(&a, &b) < 1e-5, "differ by {}", max_diff(&a, &b));
    let short = embed_one(model, "the quick brown fox jumps over the lazy dog");
    assert!(max_diff(&a, &short) > 1e-3, "the long text is still read");
}

#[test]
fn similar_meanings_are_closer_than_unrelated_ones() {
    let Some(model) = model("similar_meanings_are_closer_than_unrelated_ones") else {
        return;
    };
    let tools = [
        Tool::new(
            "send_mail",
            "Compose and deliver an electronic message to a recipient",
        ),
        Tool::new("get_forecast", "Weather forecast for a location"),
        Tool::new("create_invoice", "Bill a customer for an order"),
    ];
    let texts: Vec<String> = tools.iter().map(embedding_text).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut set = VectorSet::new(model.dimensions());
    for vector in model.embed(&refs).expect("embeds") {
        set.push(&vector).expect("384 dimensions");
    }
    // No word in common with the right tool: only the model's sense of meaning can find it.
    for (query, expected) in [
        ("email my colleague", 0),
        ("will it rain tomorrow", 1),
        ("charge the client", 2),
    ] {
        let hits = set.top_k(&embed_one(model, query), 3).expect("scan");
        assert_eq!(hits[0].row, expected, "`{query}`: {hits:?}");
    }
}

#[test]
fn identity_is_the_hash_of_the_files_and_the_files_are_the_pinned_ones() {
    let Some(model) = model("identity_is_the_hash_of_the_files_and_the_files_are_the_pinned_ones")
    else {
        return;
    };
    let dir = model.dir().to_path_buf();
    assert_eq!(model_identity(&dir).expect("hashes"), model.model_id());
    assert_eq!(verify_default_model(&dir).expect("reads"), None);
}

#[test]
fn a_query_embeds_close_to_the_same_text_and_is_named_apart_when_computed_in_bytes() {
    let Some(model) =
        model("a_query_embeds_close_to_the_same_text_and_is_named_apart_when_computed_in_bytes")
    else {
        return;
    };
    let queries = [
        "remember that Alice likes tea",
        "what time is it in Tokyo",
        "send an email to a colleague",
        "find all the PDF files somewhere under my projects and list the biggest ones first",
        "x",
    ];
    for query in queries {
        let as_text = embed_one(model, query);
        let as_query = model.embed_query(query).expect("embeds a query");
        assert_eq!(as_query.len(), 384);
        assert!(
            (dot(&as_query, &as_query) - 1.0).abs() < 1e-4,
            "L2-normalised"
        );
        let cosine = dot(&as_query, &as_text);
        assert!(
            cosine > 0.99,
            "{query:?}: cosine {cosine} to its vector as a text"
        );
        assert_eq!(
            as_query,
            model.embed_query(query).expect("embeds a query"),
            "the same query gives the same vector"
        );
        if as_query == as_text {
            assert_eq!(model.query_model_id(), model.model_id(), "{query:?}");
        } else {
            assert_ne!(
                model.query_model_id(),
                model.model_id(),
                "{query:?}: a vector computed another way must be named apart"
            );
        }
    }
}

#[test]
fn a_query_computed_in_bytes_is_read_to_its_first_128_tokens() {
    let Some(model) = model("a_query_computed_in_bytes_is_read_to_its_first_128_tokens") else {
        return;
    };
    if model.query_model_id() == model.model_id() {
        // No byte multiply-add here: queries are embedded as texts, to their 256 tokens.
        return;
    }
    // "tea" is one word piece: [CLS], 126 of them and [SEP] are 128 tokens.
    let words = |n: usize| vec!["tea"; n].join(" ");
    let at_limit = model.embed_query(&words(126)).expect("embeds");
    assert_eq!(model.embed_query(&words(300)).expect("embeds"), at_limit);
    assert_ne!(model.embed_query(&words(125)).expect("embeds"), at_limit);
}

/// Where queries have their own encoder, a model reads its text encoder when texts first come,
/// lets it go when told it is idle, answers queries meanwhile, and reads it again for the next
/// texts: the same vectors as before. Weights changed on disk in the meantime are refused, not
/// mixed with the vectors already made.
#[test]
fn an_idle_model_reads_its_text_encoder_again_from_the_same_file() {
    let Some(installed) =
        peers::model_or_skip("an_idle_model_reads_its_text_encoder_again_from_the_same_file")
    else {
        return;
    };
    // A model of its own, in a folder of its own: other tests share theirs.
    let root = tempfile::tempdir().unwrap();
    for file in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::fs::copy(installed.join(file), root.path().join(file)).unwrap();
    }
    let model = BertEmbedder::load(root.path()).expect("loads");
    let has_query_encoder = model.query_model_id() != model.model_id();
    assert_eq!(model.holds_text_encoder(), !has_query_encoder);
    let texts = ["Create an issue in a repository", "Read a file from disk"];
    let before = model.embed(&texts).expect("embeds");
    let query = model
        .embed_query("open a bug report")
        .expect("embeds a query");
    assert!(model.holds_text_encoder());
    model.idle();
    assert_eq!(model.holds_text_encoder(), !has_query_encoder);
    assert_eq!(
        model
            .embed_query("open a bug report")
            .expect("embeds a query"),
        query
    );
    assert_eq!(model.embed(&texts).expect("embeds again"), before);
    assert!(model.holds_text_encoder());

    model.idle();
    let weights = root.path().join("model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&weights, bytes).unwrap();
    match model.embed(&texts) {
        Err(error) if has_query_encoder => {
            assert!(error.to_string().contains("changed since"), "{error}");
        }
        // Without a query encoder the text encoder stays, and the file is not read again.
        Ok(again) if !has_query_encoder => assert_eq!(again, before),
        other => panic!("{:?}", other.map(|v| v.len())),
    }
}
