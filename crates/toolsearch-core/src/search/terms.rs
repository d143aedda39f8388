//! The catalog's words as numbers, and each tool's words field by field.
//!
//! Explaining a result (`matched_on`), rewarding name coverage and removing a tool all need to know
//! which words a tool holds where. Keeping that as a short sorted list of numbers per tool, made
//! once when the tool is indexed, means none of them analyses a tool's text again.

use super::analyzer::is_stopword;
use super::index::{AnalyzedTool, Field, FIELD_COUNT};
use crate::error::{Error, Result};
use rustc_hash::FxHashMap;

/// The word occurs in the field as a stem.
pub const STEM: u32 = 1;
/// The word occurs in the field as written (lowercased).
pub const RAW: u32 = 2;
const FORM_BITS: u32 = 2;
const FIELD_BITS: u32 = 3;
const ID_SHIFT: u32 = FORM_BITS + FIELD_BITS;
/// Word numbers must fit beside a field and the form flags in a `u32`.
const MAX_WORDS: usize = 1 << (32 - ID_SHIFT);

/// Every word indexed, numbered, with how many live tools hold it in each field, stemmed and raw.
///
/// Numbers are never reused, so a word stays in the table after the last tool holding it is
/// removed (its counts drop to zero); the table grows only with words never seen before.
#[derive(Default)]
pub struct Vocabulary {
    ids: FxHashMap<Box<str>, u32>,
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

    /// Whether a live tool holds `text` in `field`, in the given form. Checked before touching
    /// tantivy's term dictionaries: most query words occur in few fields, and a hash lookup is far
    /// cheaper than a dictionary lookup that finds nothing.
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
        self.ids.insert(text.into(), id);
        self.counts.push([0; 2 * FIELD_COUNT]);
        Ok(id)
    }

    /// Numbers the words of a tool being indexed, counts them, and returns its word list.
    pub fn add(&mut self, analyzed: &AnalyzedTool) -> Result<SlotTerms> {
        let mut name_words = Vec::new();
        for token in &analyzed.fields[Field::Name as usize] {
            if !is_stopword(&token.raw) && !token.raw.chars().all(|c| c.is_ascii_digit()) {
                name_words.push(self.intern(&token.stem)?);
            }
        }
        let mut entries = Vec::new();
        for field in Field::ALL {
            let field_bits = (field as u32) << FORM_BITS;
            for token in &analyzed.fields[field as usize] {
                entries.push(self.intern(&token.stem)? << ID_SHIFT | field_bits | STEM);
                entries.push(self.intern(&token.raw)? << ID_SHIFT | field_bits | RAW);
            }
        }
        entries.sort_unstable();
        // One entry per (word, field), its form flags merged.
        let mut merged: Vec<u32> = Vec::with_capacity(entries.len() + name_words.len() + 1);
        merged.push(name_words.len() as u32);
        merged.extend(&name_words);
        let head = merged.len();
        for entry in entries {
            match merged[head..].last_mut() {
                Some(last) if *last >> FORM_BITS == entry >> FORM_BITS => *last |= entry,
                _ => merged.push(entry),
            }
        }
        let terms = SlotTerms(merged.into_boxed_slice());
        self.adjust(&terms, true);
        Ok(terms)
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

    /// Every word a live tool holds as written in one of `fields`, once.
    pub fn for_each_raw(&self, fields: &[Field], mut visit: impl FnMut(&str)) {
        for (text, &id) in &self.ids {
            let counts = &self.counts[id as usize];
            if fields.iter().any(|&f| counts[count_slot(f, true)] > 0) {
                visit(text);
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
    use crate::search::analyzer::Analyzer;
    use crate::tool::Tool;

    fn analyzed(tool: &Tool) -> AnalyzedTool {
        AnalyzedTool::new(&Analyzer::new(), tool)
    }

    #[test]
    fn a_tool_holds_its_words_in_their_fields_and_forms() {
        let tool = Tool::new("get_documents", "Lists the files").with_server("drive");
        let mut vocabulary = Vocabulary::default();
        let terms = vocabulary.add(&analyzed(&tool)).unwrap();
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
        let terms_a = vocabulary.add(&analyzed(&a)).unwrap();
        let _terms_b = vocabulary.add(&analyzed(&b)).unwrap();
        vocabulary.remove(&terms_a);
        assert!(!vocabulary.contains("send", Field::Name, false));
        assert!(vocabulary.contains("mail", Field::Name, false));
        assert!(vocabulary.contains("read", Field::Name, true));
        let mut raw_names = Vec::new();
        vocabulary.for_each_raw(&[Field::Name], |w| raw_names.push(w.to_string()));
        raw_names.sort();
        assert_eq!(raw_names, ["mail", "read"]);
    }
}
