//! `matched_on`: which fields of a result matched which query terms.

use super::field::{Field, FIELD_COUNT};
use super::index::ToolIndex;
use super::terms::{RAW, STEM};
use crate::tool::Tool;
use regex::Regex;
use schemars::JsonSchema;
use serde::Serialize;

/// Which part of a tool matched which query terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct MatchedOn {
    pub field: &'static str,
    pub terms: Vec<String>,
}

impl MatchedOn {
    /// The `field` of a result found by meaning: no query word matched it, its embedding is
    /// close to the query's.
    pub const MEANING: &'static str = "meaning";
}

/// A query term as the scorer used it, kept to explain the results afterwards.
#[derive(Debug, Clone)]
pub struct QueryTerm {
    /// How the term is reported: the word as typed, `pre*`, or `typo~word` for a fuzzy match.
    pub label: String,
    pub fields: &'static [Field],
    pub forms: Vec<Form>,
}

#[derive(Debug, Clone)]
pub enum Form {
    Stem(String),
    Raw(String),
}

/// A query term with its forms as the index numbers them, resolved once per search.
pub struct ResolvedTerm<'a> {
    term: &'a QueryTerm,
    /// (word number, `STEM` or `RAW`) for each form a tool ever held.
    forms: Vec<(u32, u32)>,
}

pub fn resolve<'a>(index: &ToolIndex, terms: &'a [QueryTerm]) -> Vec<ResolvedTerm<'a>> {
    terms
        .iter()
        .map(|term| ResolvedTerm {
            term,
            forms: term
                .forms
                .iter()
                .filter_map(|form| match form {
                    Form::Stem(s) => Some((index.term_id(s)?, STEM)),
                    Form::Raw(r) => Some((index.term_id(r)?, RAW)),
                })
                .collect(),
        })
        .collect()
}

/// Which fields of the tool in `slot` hold which of the query's terms, from the slot's entries in
/// the terms' posting lists (nothing is analysed again).
pub fn matched_on(index: &ToolIndex, slot: u32, terms: &[ResolvedTerm]) -> Vec<MatchedOn> {
    let mut by_field: [Vec<String>; FIELD_COUNT] = Default::default();
    for resolved in terms {
        let held = resolved.forms.iter().fold(0u8, |acc, &(id, form)| {
            acc | index.fields_holding(slot, id, form)
        });
        for &field in resolved.term.fields {
            let matched = &mut by_field[field as usize];
            if held & (1 << field as u8) != 0 && !matched.contains(&resolved.term.label) {
                matched.push(resolved.term.label.clone());
            }
        }
    }
    Field::ALL
        .into_iter()
        .zip(by_field)
        .filter(|(_, terms)| !terms.is_empty())
        .map(|(field, terms)| MatchedOn {
            field: field.as_str(),
            terms,
        })
        .collect()
}

const REGEX_FIELD_WEIGHTS: [(Field, f32); 3] = [
    (Field::Name, 1.0),
    (Field::Description, 0.6),
    (Field::ParamNames, 0.4),
];

fn regex_field_matches(regex: &Regex, tool: &Tool, field: Field) -> bool {
    match field {
        Field::Name => regex.is_match(tool.name()),
        Field::Description => regex.is_match(tool.description()),
        _ => tool
            .parameters()
            .iter()
            .any(|(name, description)| regex.is_match(name) || regex.is_match(description)),
    }
}

/// Regex mode's score: the weighted share of name, description and arguments that match.
pub fn regex_score(regex: &Regex, tool: &Tool) -> f32 {
    let total: f32 = REGEX_FIELD_WEIGHTS.iter().map(|(_, w)| w).sum();
    let matched: f32 = REGEX_FIELD_WEIGHTS
        .iter()
        .filter(|(field, _)| regex_field_matches(regex, tool, *field))
        .map(|(_, w)| w)
        .sum();
    matched / total
}

pub fn regex_fields(regex: &Regex, tool: &Tool) -> Vec<MatchedOn> {
    REGEX_FIELD_WEIGHTS
        .iter()
        .filter(|(field, _)| regex_field_matches(regex, tool, *field))
        .map(|(field, _)| MatchedOn {
            field: if *field == Field::ParamNames {
                "parameters"
            } else {
                field.as_str()
            },
            terms: vec![regex.as_str().to_string()],
        })
        .collect()
}
