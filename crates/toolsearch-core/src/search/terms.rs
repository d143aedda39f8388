//! The catalog's words as numbers, and each tool's words field by field.
//!
//! Explaining a result (`matched_on`), rewarding name coverage and removing a tool all need to know
//! which words a tool holds where. Keeping that as a short sorted list of numbers per tool, made
//! once when the tool is indexed, means none of them analyses a tool's text again.

use super::field::{Field, FIELD_COUNT};
use crate::analyzer::{is_stopword, lowercase_into, split_words, Analyzer};
use crate::error::{Error, Result};
use crate::tool::Tool;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// The word occurs in the field as a stem.
pub const STEM: u32 = 1;
/// The word occurs in the field as written (lowercased).
pub const RAW: u32 = 2;
const FORM_BITS: u32 = 2;
const FIELD_BITS: u32 = 3;
const ID_SHIFT: u32 = FORM_BITS + FIELD_BITS;
/// Word numbers must fit beside a field and the form flags in a `u32`.
const MAX_WORDS: usize = 1 << (32 - ID_SHIFT);
/// A word not yet seen as written has no stem number yet.
const NO_STEM: u32 = u32::MAX;
/// Position gap between the values of a multi-valued field, so phrases never span two values.
const VALUE_GAP: u32 = 16;

/// One word of a tool's text as the index keeps it: the numbers of its written (lowercased) form
/// and of its stem, and its position in the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordToken {
    pub raw: u32,
    pub stem: u32,
    pub position: u32,
}

/// The analysed text of one tool, field by field, as word numbers.
pub struct AnalyzedTool {
    pub fields: [Vec<WordToken>; FIELD_COUNT],
    /// The stems of the name's words, stopwords and bare numbers left out.
    name_words: Vec<u32>,
}

/// Every word indexed, numbered, with how many live tools hold it in each field, stemmed and raw.
///
/// Numbers are never reused, so a word stays in the table after the last tool holding it is
/// removed (its counts drop to zero); the table grows only with words never seen before.
#[derive(Default)]
pub struct Vocabulary {
    ids: FxHashMap<Arc<str>, u32>,
    words: Vec<Arc<str>>,
    /// The stem's number of each word seen as written: indexing stems each distinct word once.
    stems: Vec<u32>,
    counts: Vec<[u32; 2 * FIELD_COUNT]>,
}

fn count_slot(field: Field, raw: bool) -> usize {
    field as usize + if raw { FIELD_COUNT } else { 0 }
}

impl Vocabulary {
    /// The number of a word, if any tool ever held it.
    pub fn id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// The text of word number `id`.
    pub fn word(&self, id: u32) -> &str {
        self.words.get(id as usize).map_or("", |w| w)
    }

    /// Whether a live tool holds `text` in `field`, in the given form.
    #[cfg(test)]
    pub fn contains(&self, text: &str, field: Field, raw: bool) -> bool {
        self.id(text)
            .is_some_and(|id| self.counts[id as usize][count_slot(field, raw)] > 0)
    }

    fn intern(&mut self, text: &str) -> Result<u32> {
        if let Some(&id) = self.ids.get(text) {
            return Ok(id);
        }
        if self.counts.len() >= MAX_WORDS {
            return Err(Error::Index(format!(
                "more than {MAX_WORDS} distinct words in the catalog; split it across engines"
            )));
        }
        let id = self.counts.len() as u32;
        let text: Arc<str> = text.into();
        self.ids.insert(text.clone(), id);
        self.words.push(text);
        self.stems.push(NO_STEM);
        self.counts.push([0; 2 * FIELD_COUNT]);
        Ok(id)
    }

    /// The numbers of a lowercased word and of its stem.
    fn written(&mut self, analyzer: &Analyzer, raw: &str) -> Result<WordToken> {
        let id = self.intern(raw)?;
        let mut stem = self.stems[id as usize];
        if stem == NO_STEM {
            stem = self.intern(&analyzer.stem(raw))?;
            self.stems[id as usize] = stem;
        }
        Ok(WordToken {
            raw: id,
            stem,
            position: 0,
        })
    }

    /// Analyses a tool the way the analyzer analyses text (same words, stems and positions),
    /// straight into word numbers: no string is made per word, only per word never seen before.
    pub fn analyze(&mut self, analyzer: &Analyzer, tool: &Tool) -> Result<AnalyzedTool> {
        let mut buffer = String::new();
        let mut text = |vocabulary: &mut Self,
                        values: &mut dyn Iterator<Item = &str>,
                        content_only: bool|
         -> Result<Vec<WordToken>> {
            let mut out = Vec::new();
            let mut base = 0u32;
            for value in values {
                let mut next = None;
                for ((from, to), position) in split_words(value).into_iter().zip(0u32..) {
                    lowercase_into(&value[from..to], &mut buffer);
                    if content_only && is_stopword(&buffer) {
                        continue;
                    }
                    let token = vocabulary.written(analyzer, &buffer)?;
                    out.push(WordToken {
                        position: base + position,
                        ..token
                    });
                    next = Some(position + 1);
                }
                base += next.unwrap_or(0) + VALUE_GAP;
            }
            Ok(out)
        };
        let params = tool.parameters();
        let mut fields: [Vec<WordToken>; FIELD_COUNT] = Default::default();
        fields[Field::Name as usize] = text(self, &mut std::iter::once(tool.name.as_str()), false)?;
        fields[Field::Description as usize] =
            text(self, &mut std::iter::once(tool.description.as_str()), true)?;
        fields[Field::ParamNames as usize] =
            text(self, &mut params.iter().map(|(n, _)| n.as_str()), false)?;
        fields[Field::ParamDescriptions as usize] =
            text(self, &mut params.iter().map(|(_, d)| d.as_str()), true)?;
        fields[Field::Server as usize] =
            text(self, &mut std::iter::once(tool.server.as_str()), false)?;
        fields[Field::Category as usize] = text(
            self,
            &mut std::iter::once(tool.category.as_deref().unwrap_or_default()),
            false,
        )?;
        fields[Field::Tags as usize] =
            text(self, &mut tool.tags.iter().map(String::as_str), false)?;
        let name_words = fields[Field::Name as usize]
            .iter()
            .filter(|t| {
                let raw = self.word(t.raw);
                !is_stopword(raw) && !raw.chars().all(|c| c.is_ascii_digit())
            })
            .map(|t| t.stem)
            .collect();
        Ok(AnalyzedTool { fields, name_words })
    }

    /// Counts the words of a tool being indexed and returns its word list.
    pub fn add(&mut self, analyzed: &AnalyzedTool) -> SlotTerms {
        let mut entries = Vec::new();
        for field in Field::ALL {
            let field_bits = (field as u32) << FORM_BITS;
            for token in &analyzed.fields[field as usize] {
                entries.push(token.stem << ID_SHIFT | field_bits | STEM);
                entries.push(token.raw << ID_SHIFT | field_bits | RAW);
            }
        }
        entries.sort_unstable();
        let name_words = &analyzed.name_words;
        // One entry per (word, field), its form flags merged.
        let mut merged: Vec<u32> = Vec::with_capacity(entries.len() + name_words.len() + 1);
        merged.push(name_words.len() as u32);
        merged.extend(name_words);
        let head = merged.len();
        for entry in entries {
            match merged[head..].last_mut() {
                Some(last) if *last >> FORM_BITS == entry >> FORM_BITS => *last |= entry,
                _ => merged.push(entry),
            }
        }
        let terms = SlotTerms(merged.into_boxed_slice());
        self.adjust(&terms, true);
        terms
    }

    /// Uncounts the words of a tool being removed.
    pub fn remove(&mut self, terms: &SlotTerms) {
        self.adjust(terms, false);
    }

    fn adjust(&mut self, terms: &SlotTerms, add: bool) {
        for &entry in terms.entries() {
            let (id, field, forms) = decode(entry);
            let counts = &mut self.counts[id as usize];
            for (flag, raw) in [(STEM, false), (RAW, true)] {
                if forms & flag != 0 {
                    let cell = &mut counts[count_slot(field, raw)];
                    *cell = if add {
                        *cell + 1
                    } else {
                        cell.saturating_sub(1)
                    };
                }
            }
        }
    }

    /// Words a live tool holds as written in one of `fields` that start with `prefix`, at most
    /// `max`, in order.
    pub fn raw_with_prefix(&self, fields: &[Field], prefix: &str, max: usize) -> Vec<String> {
        let mut found: Vec<&str> = self
            .ids
            .iter()
            .filter(|(text, &id)| {
                text.starts_with(prefix)
                    && fields
                        .iter()
                        .any(|&f| self.counts[id as usize][count_slot(f, true)] > 0)
            })
            .map(|(text, _)| &**text)
            .collect();
        found.sort_unstable();
        found.into_iter().take(max).map(str::to_string).collect()
    }

    /// Every word a live tool holds as written in one of `fields`, once, with the most live
    /// tools holding it as written in any one of those fields (a lower bound of its document
    /// frequency, cheap to keep).
    pub fn for_each_raw(&self, fields: &[Field], mut visit: impl FnMut(&str, u32)) {
        for (text, &id) in &self.ids {
            let counts = &self.counts[id as usize];
            let most = fields
                .iter()
                .map(|&f| counts[count_slot(f, true)])
                .max()
                .unwrap_or(0);
            if most > 0 {
                visit(text, most);
            }
        }
    }
}

fn decode(entry: u32) -> (u32, Field, u32) {
    let field = Field::ALL[((entry >> FORM_BITS) & ((1 << FIELD_BITS) - 1)) as usize];
    (entry >> ID_SHIFT, field, entry & ((1 << FORM_BITS) - 1))
}

/// One tool's words: the stems of its name's content words in order, then one entry per
/// (word, field) with the forms it occurs in, sorted.
#[derive(Default)]
pub struct SlotTerms(Box<[u32]>);

impl SlotTerms {
    /// The stems of the name's words, stopwords and bare numbers left out, repeats kept.
    pub fn name_words(&self) -> &[u32] {
        match self.0.split_first() {
            Some((&len, rest)) => &rest[..len as usize],
            None => &[],
        }
    }

    fn entries(&self) -> &[u32] {
        match self.0.split_first() {
            Some((&len, rest)) => &rest[len as usize..],
            None => &[],
        }
    }

    /// How many (word, field, form) the tool holds: its entries in the inverted index.
    pub fn posting_count(&self) -> usize {
        self.entries()
            .iter()
            .map(|&e| (e & ((1 << FORM_BITS) - 1)).count_ones() as usize)
            .sum()
    }

    /// The fields (bit `1 << field`) where the tool holds word `id` in one of the forms of `forms`.
    pub fn fields_holding(&self, id: u32, forms: u32) -> u8 {
        let entries = self.entries();
        let start = entries.partition_point(|e| e >> ID_SHIFT < id);
        let mut fields = 0u8;
        for &entry in entries[start..].iter().take_while(|e| *e >> ID_SHIFT == id) {
            if entry & forms != 0 {
                fields |= 1 << ((entry >> FORM_BITS) & ((1 << FIELD_BITS) - 1));
            }
        }
        fields
    }

    /// Whether the tool holds word `id` in `field` in one of the forms of `forms` (`STEM`, `RAW`).
    #[cfg(test)]
    pub fn holds(&self, id: u32, field: Field, forms: u32) -> bool {
        let key = id << FIELD_BITS | field as u32;
        let entries = self.entries();
        entries
            .binary_search_by(|e| (e >> FORM_BITS).cmp(&key))
            .is_ok_and(|i| entries[i] & forms != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyzer::Token;
    use serde_json::json;

    fn add(vocabulary: &mut Vocabulary, tool: &Tool) -> SlotTerms {
        let analyzed = vocabulary.analyze(&Analyzer::new(), tool).unwrap();
        vocabulary.add(&analyzed)
    }

    /// What the analyzer makes of the values of one field, positions offset per value.
    fn expected(values: &[Vec<Token>]) -> Vec<(String, String, u32)> {
        let mut out = Vec::new();
        let mut base = 0;
        for tokens in values {
            out.extend(
                tokens
                    .iter()
                    .map(|t| (t.raw.clone(), t.stem.clone(), base + t.position)),
            );
            base += tokens.last().map_or(0, |t| t.position + 1) + VALUE_GAP;
        }
        out
    }

    #[test]
    fn indexing_analyses_a_tool_as_the_analyzer_analyses_a_query() {
        let analyzer = Analyzer::new();
        let tool = Tool::new(
            "getUserFiles",
            "Lists the files of a user's Drive, 10 at a time",
        )
        .with_server("google-drive")
        .with_category("Storage & Files")
        .with_tags(["cloud storage", "ÉTÉ"])
        .with_schema(json!({"type": "object", "properties": {
            "the_folder": {"type": "string", "description": "The folder to list"},
            "maxResults": {"type": "integer", "description": "At most this many"}
        }}));
        let mut vocabulary = Vocabulary::default();
        let analyzed = vocabulary.analyze(&analyzer, &tool).unwrap();
        let words = |field: Field| -> Vec<(String, String, u32)> {
            analyzed.fields[field as usize]
                .iter()
                .map(|t| {
                    let word = |id| vocabulary.word(id).to_string();
                    (word(t.raw), word(t.stem), t.position)
                })
                .collect()
        };
        let params = tool.parameters();
        assert_eq!(words(Field::Name), expected(&[analyzer.tokens(&tool.name)]));
        assert_eq!(
            words(Field::Description),
            expected(&[analyzer.content_tokens(&tool.description)])
        );
        let names: Vec<_> = params.iter().map(|(n, _)| analyzer.tokens(n)).collect();
        assert_eq!(words(Field::ParamNames), expected(&names));
        let descriptions: Vec<_> = params
            .iter()
            .map(|(_, d)| analyzer.content_tokens(d))
            .collect();
        assert_eq!(words(Field::ParamDescriptions), expected(&descriptions));
        assert_eq!(
            words(Field::Server),
            expected(&[analyzer.tokens("google-drive")])
        );
        assert_eq!(
            words(Field::Category),
            expected(&[analyzer.tokens("Storage & Files")])
        );
        let tags: Vec<_> = tool.tags.iter().map(|t| analyzer.tokens(t)).collect();
        assert_eq!(words(Field::Tags), expected(&tags));
        assert!(words(Field::Tags).iter().any(|(raw, _, _)| raw == "été"));
    }

    #[test]
    fn a_tool_holds_its_words_in_their_fields_and_forms() {
        let tool = Tool::new("get_documents", "Lists the files").with_server("drive");
        let mut vocabulary = Vocabulary::default();
        let terms = add(&mut vocabulary, &tool);
        let id = |w: &str| vocabulary.id(w).unwrap();
        assert!(terms.holds(id("document"), Field::Name, STEM));
        assert!(!terms.holds(id("document"), Field::Name, RAW));
        assert!(terms.holds(id("documents"), Field::Name, RAW));
        assert!(terms.holds(id("file"), Field::Description, STEM));
        assert!(!terms.holds(id("file"), Field::Name, STEM | RAW));
        assert!(terms.holds(id("drive"), Field::Server, STEM | RAW));
        assert_eq!(
            terms.fields_holding(id("document"), STEM | RAW),
            1 << Field::Name as u8
        );
        assert_eq!(terms.fields_holding(id("document"), RAW), 0);
        // "the" is a stopword: descriptions drop it, and name coverage ignores it.
        assert_eq!(vocabulary.id("the"), None);
        assert_eq!(terms.name_words(), &[id("get"), id("document")]);
    }

    #[test]
    fn removing_a_tool_uncounts_its_words() {
        let a = Tool::new("send_mail", "Sends mail");
        let b = Tool::new("read_mail", "Reads mail");
        let mut vocabulary = Vocabulary::default();
        let terms_a = add(&mut vocabulary, &a);
        let _terms_b = add(&mut vocabulary, &b);
        vocabulary.remove(&terms_a);
        assert!(!vocabulary.contains("send", Field::Name, false));
        assert!(vocabulary.contains("mail", Field::Name, false));
        assert!(vocabulary.contains("read", Field::Name, true));
        let mut raw_names = Vec::new();
        vocabulary.for_each_raw(&[Field::Name], |w, _| raw_names.push(w.to_string()));
        raw_names.sort();
        assert_eq!(raw_names, ["mail", "read"]);
    }
}
