//! `matched_on`: which fields of a result matched which query terms.

use super::analyzer::Analyzer;
use super::index::{AnalyzedTool, Field};
use super::MatchedOn;
use crate::tool::Tool;
use regex::Regex;

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

pub fn matched_on(analyzer: &Analyzer, tool: &Tool, terms: &[QueryTerm]) -> Vec<MatchedOn> {
    if terms.is_empty() {
        return Vec::new();
    }
    let analyzed = AnalyzedTool::new(analyzer, tool);
    let mut out = Vec::new();
    for field in Field::ALL {
        let tokens = &analyzed.fields[field as usize];
        let mut matched: Vec<String> = Vec::new();
        for term in terms.iter().filter(|t| t.fields.contains(&field)) {
            let hit = tokens.iter().any(|tok| {
                term.forms.iter().any(|form| match form {
                    Form::Stem(s) => &tok.stem == s,
                    Form::Raw(r) => &tok.raw == r,
                })
            });
            if hit && !matched.contains(&term.label) {
                matched.push(term.label.clone());
            }
        }
        if !matched.is_empty() {
            out.push(MatchedOn {
                field: field.as_str(),
                terms: matched,
            });
        }
    }
    out
}

const REGEX_FIELD_WEIGHTS: [(Field, f32); 3] = [
    (Field::Name, 1.0),
    (Field::Description, 0.6),
    (Field::ParamNames, 0.4),
];

fn regex_field_matches(regex: &Regex, tool: &Tool, field: Field) -> bool {
    match field {
        Field::Name => regex.is_match(&tool.name),
        Field::Description => regex.is_match(&tool.description),
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
