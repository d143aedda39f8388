//! Ranking parameters. One configuration serves every catalog: nothing here is tuned per dataset.

use super::field::{Field, FIELD_COUNT};
use crate::error::{Error, Result};

/// BM25F parameters of one field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FieldParams {
    /// How much a match in this field counts relative to the others.
    pub weight: f32,
    /// Length normalisation, 0 (none) to 1 (full).
    pub b: f32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SearchConfig {
    pub fields: [FieldParams; FIELD_COUNT],
    /// Term-frequency saturation.
    pub k1: f32,
    /// Extra weight of a match on the word as written over a match on its stem only.
    pub exact_form_boost: f32,
    /// Expand query words that match nothing to similar words of the catalog (never onto
    /// stop-like words, `search::fuzzy`). Off: it earned nothing on any dataset held out
    /// (docs/EVAL.md, "Ablation").
    pub fuzzy: bool,
    /// A query word repeated n times weighs n^this (0: repeats ignored, 1: linear).
    pub query_term_frequency: f32,
    /// Search for query words made only of digits.
    pub numeric_query_words: bool,
    /// Drop words requests are full of ("want", "help", "use") from natural-language queries.
    pub drop_request_filler: bool,
    /// Weight of a query word's synonyms relative to the word itself (0: off).
    pub synonym_weight: f32,
    /// Bonus, relative to the words' idf, for consecutive query words that stand close together.
    pub proximity: f32,
    /// Share of the best score a tool gains when the query covers its whole name (0: off).
    pub name_coverage: f32,
    /// Share of its server's best score a matching tool gains (0: off, the default: it helps
    /// the one dataset whose tools have servers, so no dataset held out chose it; docs/EVAL.md).
    pub server_aggregation: f32,
    /// Results below this normalised score (0..1) are dropped.
    pub threshold: f32,
    /// When set, results below this fraction of the best score are dropped.
    pub top_band: Option<f32>,
    /// Longest keyword query accepted, in characters.
    pub max_query_chars: usize,
    /// Longest regex accepted, in characters.
    pub max_regex_chars: usize,
    /// Compiled-size limit of a regex, in bytes.
    pub regex_size_limit: usize,
    /// Catalogs above this size answer a miss with categories instead of every name.
    pub fallback_names_max: usize,
    /// How hybrid mode fuses the keyword and the dense ranking.
    pub fusion: Fusion,
    /// The dense ranking's share in a convex fusion (0: words only, 1: meaning only). 0.65 is
    /// the middle of the plateau where every evaluation set, each left out in turn, puts it
    /// (docs/EVAL.md).
    pub dense_weight: f32,
    /// Which of a tool's vectors a query is compared with.
    pub dense_view: DenseView,
    /// Rank offset of reciprocal rank fusion.
    pub rrf_k: f32,
    /// How the dense similarities are scaled before a convex fusion.
    pub dense_normalization: DenseNormalization,
    /// How many of the most similar tools the dense ranking contributes.
    pub dense_candidates: usize,
    /// Fuse every keyword candidate with its own similarity, not only the most similar tools.
    pub dense_for_keyword_hits: bool,
    /// A tool no query word matched enters the results by meaning from this cosine similarity
    /// up; under it only the few closest enter, as guesses scored under the confidence floor.
    pub min_similarity: f32,
    /// How many of the closest tools by meaning enter a hybrid fusion whatever their
    /// similarity, as guesses under `min_similarity` (docs/EVAL.md, "Scores and 'nothing fits'").
    pub guesses: usize,
    /// Longest query text embedded, in characters, cut at a word; the keyword side reads it
    /// all. A sentence model's cost grows with every token, and a request's first 400
    /// characters (about 90 tokens) carry what it asks for: cutting there bounds the slowest
    /// query embedding at about a third of a 256-token one, for 0.1 nDCG@10 on one dataset of
    /// five (docs/EVAL.md).
    pub max_embedded_query_chars: usize,
    /// How one query's dense share is set: the same for every query, or from what its two
    /// lists show (docs/EVAL.md, "Fusion that adapts per query").
    pub fusion_weighting: FusionWeighting,
    /// How strongly the per-query evidence moves the weight away from `dense_weight` (an
    /// exponent on it; 0 is the fixed weight).
    pub fusion_sharpness: f32,
    /// The cosine similarity at which meaning alone makes a result confident (calibrated to
    /// `CONFIDENT_SCORE`); a search that read meaning says nothing fits only when no result
    /// reaches this nor `words_floor`. 0.05: under every fitting request's best similarity on
    /// the visible sets (lowest 0.123) and the everyday check (lowest 0.075), so that no
    /// fitting request is turned away for its similarity; the floor chosen by
    /// leave-one-dataset-out (0.275) turns away some (docs/EVAL.md, "Scores and 'nothing
    /// fits'"). 1 turns it off.
    pub meaning_floor: f32,
    /// The keyword evidence (the keyword score as a share of the most the query's words could
    /// give, times the share of its words the catalog knows) at which words alone make a result
    /// confident; 0.05, chosen by leave-one-dataset-out with `meaning_floor`. 1 turns it off.
    pub words_floor: f32,
}

/// How hybrid search sets the dense share of one query's fusion. `dense_weight` is the prior in
/// each; the adaptive ones move away from it by evidence of this query, learned from no labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusionWeighting {
    /// `dense_weight` for every query.
    Fixed,
    /// Each list weighs by how far its first score stands out of its first ten (a z-score).
    Standout,
    /// The keyword side weighs by the share of the query's words the catalog knows.
    Coverage,
}

impl FusionWeighting {
    pub fn as_str(self) -> &'static str {
        match self {
            FusionWeighting::Fixed => "fixed",
            FusionWeighting::Standout => "standout",
            FusionWeighting::Coverage => "coverage",
        }
    }
}

/// Which of a tool's two vectors (see `search::dense`) give its similarity to a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenseView {
    /// The larger of the two cosines.
    Max,
    /// The whole tool's vector alone.
    Whole,
    /// The purpose's vector alone.
    Purpose,
}

/// How dense similarities are put on the keyword scores' 0..1 scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenseNormalization {
    /// The best candidate 1, the worst 0.
    MinMax,
    /// Divided by the best (0 stays 0): the gaps keep their size.
    Max,
    /// The cosine similarity as it is (negatives as 0).
    Raw,
}

/// How hybrid search combines the ranking by words with the ranking by meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fusion {
    /// `dense_weight * dense + (1 - dense_weight) * keyword`, each list's scores put in standard
    /// deviations above its lowest (a z-score) first.
    ZScore,
    /// `dense_weight * dense + (1 - dense_weight) * keyword`, each scaled as
    /// `dense_normalization` says (min-max by default).
    Convex,
    /// Reciprocal rank fusion: `Σ 1 / (rrf_k + rank)`, ranks only, each list's term weighed
    /// by its share.
    Rrf,
    /// The z-score sum times one plus the number of lists that hold the tool in their first
    /// ten (CombMNZ): agreement of the two lists counts.
    CombMnz,
}

impl Fusion {
    pub fn as_str(self) -> &'static str {
        match self {
            Fusion::ZScore => "zscore",
            Fusion::Convex => "convex",
            Fusion::Rrf => "rrf",
            Fusion::CombMnz => "combmnz",
        }
    }
}

impl Default for SearchConfig {
    fn default() -> Self {
        let mut fields = [FieldParams {
            weight: 1.0,
            b: 0.75,
        }; FIELD_COUNT];
        fields[Field::Name as usize] = FieldParams {
            weight: 3.0,
            b: 0.5,
        };
        fields[Field::Description as usize] = FieldParams {
            weight: 1.0,
            b: 0.9,
        };
        // 0.75: the median of the values chosen with each dataset held out (docs/EVAL.md).
        fields[Field::ParamNames as usize] = FieldParams {
            weight: 0.75,
            b: 0.5,
        };
        fields[Field::ParamDescriptions as usize] = FieldParams {
            weight: 0.7,
            b: 0.75,
        };
        fields[Field::Server as usize] = FieldParams {
            weight: 0.5,
            b: 0.3,
        };
        fields[Field::Category as usize] = FieldParams {
            weight: 0.5,
            b: 0.3,
        };
        fields[Field::Tags as usize] = FieldParams {
            weight: 0.8,
            b: 0.3,
        };
        Self {
            fields,
            k1: 1.2,
            exact_form_boost: 0.3,
            fuzzy: false,
            query_term_frequency: 0.5,
            numeric_query_words: false,
            name_coverage: 0.1,
            proximity: 0.4,
            synonym_weight: 0.4,
            drop_request_filler: true,
            server_aggregation: 0.0,
            threshold: 0.0,
            top_band: None,
            max_query_chars: 32_768,
            max_regex_chars: 200,
            regex_size_limit: 1 << 20,
            fallback_names_max: 200,
            fusion: Fusion::ZScore,
            dense_weight: 0.65,
            dense_view: DenseView::Max,
            dense_normalization: DenseNormalization::MinMax,
            rrf_k: 60.0,
            dense_candidates: 50,
            dense_for_keyword_hits: true,
            min_similarity: 0.25,
            guesses: 5,
            max_embedded_query_chars: 400,
            fusion_weighting: FusionWeighting::Fixed,
            fusion_sharpness: 1.0,
            meaning_floor: 0.05,
            words_floor: 0.05,
        }
    }
}

impl SearchConfig {
    pub fn field(&self, field: Field) -> FieldParams {
        self.fields[field as usize]
    }

    /// Sets one ranking parameter by name, as in `name.weight=3`, `description.b=0.75`, `k1=1.2`,
    /// `exact_form_boost=0.3`, `fuzzy=false`, `threshold=0.2`, `top_band=0.5`. For experiments
    /// and config files; the defaults are what ships.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let bad = |what: &str| {
            Error::InvalidSetting(format!(
                "`{key}={value}`: {what}; known keys: k1, exact_form_boost, fuzzy, threshold, \
                 top_band, query_term_frequency, numeric_query_words, \
                 server_aggregation, name_coverage, proximity, synonym_weight, drop_request_filler, \
                 fusion (zscore, convex, rrf or combmnz), fusion_weighting (fixed, standout or coverage), fusion_sharpness, meaning_floor, words_floor, dense_weight, dense_view (max, whole or purpose), dense_for_keyword_hits, min_similarity, guesses, dense_normalization (minmax, max or raw), rrf_k, dense_candidates, max_embedded_query_chars, and FIELD.weight / FIELD.b for FIELD in {}",
                Field::ALL.map(Field::as_str).join(", ")
            ))
        };
        let flag = || {
            value
                .parse::<bool>()
                .map_err(|_| bad("expected true or false"))
        };
        let number = || {
            value
                .parse::<f32>()
                .map_err(|_| bad("the value is not a number"))
        };
        if let Some((field, param)) = key.split_once('.') {
            let field = Field::ALL
                .into_iter()
                .find(|f| f.as_str() == field)
                .ok_or_else(|| bad("unknown field"))?;
            let params = &mut self.fields[field as usize];
            match param {
                "weight" => params.weight = number()?,
                "b" => params.b = number()?,
                _ => return Err(bad("unknown field parameter (weight or b)")),
            }
            return Ok(());
        }
        match key {
            "k1" => self.k1 = number()?,
            "exact_form_boost" => self.exact_form_boost = number()?,
            "threshold" => self.threshold = number()?,
            "top_band" => self.top_band = Some(number()?),
            "fuzzy" => self.fuzzy = flag()?,
            "query_term_frequency" => self.query_term_frequency = number()?,
            "numeric_query_words" => self.numeric_query_words = flag()?,
            "server_aggregation" => self.server_aggregation = number()?,
            "name_coverage" => self.name_coverage = number()?,
            "proximity" => self.proximity = number()?,
            "synonym_weight" => self.synonym_weight = number()?,
            "drop_request_filler" => self.drop_request_filler = flag()?,
            "fusion" => {
                self.fusion = match value {
                    "zscore" => Fusion::ZScore,
                    "convex" => Fusion::Convex,
                    "rrf" => Fusion::Rrf,
                    "combmnz" => Fusion::CombMnz,
                    _ => return Err(bad("expected zscore, convex, rrf or combmnz")),
                }
            }
            "fusion_weighting" => {
                self.fusion_weighting = match value {
                    "fixed" => FusionWeighting::Fixed,
                    "standout" => FusionWeighting::Standout,
                    "coverage" => FusionWeighting::Coverage,
                    _ => return Err(bad("expected fixed, standout or coverage")),
                }
            }
            "fusion_sharpness" => self.fusion_sharpness = number()?,
            "meaning_floor" => self.meaning_floor = number()?,
            "words_floor" => self.words_floor = number()?,
            "dense_weight" => self.dense_weight = number()?,
            "dense_view" => {
                self.dense_view = match value {
                    "max" => DenseView::Max,
                    "whole" => DenseView::Whole,
                    "purpose" => DenseView::Purpose,
                    _ => return Err(bad("expected max, whole or purpose")),
                }
            }
            "dense_for_keyword_hits" => self.dense_for_keyword_hits = flag()?,
            "min_similarity" => self.min_similarity = number()?,
            "guesses" => {
                self.guesses = value.parse().map_err(|_| bad("expected a whole number"))?
            }
            "dense_normalization" => {
                self.dense_normalization = match value {
                    "minmax" => DenseNormalization::MinMax,
                    "max" => DenseNormalization::Max,
                    "raw" => DenseNormalization::Raw,
                    _ => return Err(bad("expected minmax, max or raw")),
                }
            }
            "rrf_k" => self.rrf_k = number()?,
            "dense_candidates" => {
                self.dense_candidates = value.parse().map_err(|_| bad("expected a whole number"))?
            }
            "max_embedded_query_chars" => {
                self.max_embedded_query_chars =
                    value.parse().map_err(|_| bad("expected a whole number"))?
            }
            _ => return Err(bad("unknown key")),
        }
        Ok(())
    }
}
