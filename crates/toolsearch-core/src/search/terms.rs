//! The catalog's words as numbers, and each tool's words field by field.
//!
//! The vocabulary counts, for every word, the live tools holding it in each field and form; a tool
//! being removed is analysed again to uncount its words (the same text gives the same numbers), so
//! the index keeps no word list per tool. Only the stems of each name's words, which name coverage
//! reads for a search's best candidates, are kept, all slots' in one arena ([`NameWords`]).

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
        fields[Field::Name as usize] = text(self, &mut std::iter::once(tool.name()), false)?;
        fields[Field::Description as usize] =
            text(self, &mut std::iter::once(tool.description()), true)?;
        fields[Field::ParamNames as usize] =
            text(self, &mut params.iter().map(|(n, _)| n.as_str()), false)?;
        fields[Field::ParamDescriptions as usize] =
            text(self, &mut params.iter().map(|(_, d)| d.as_str()), true)?;
        fields[Field::Server as usize] = text(self, &mut std::iter::once(tool.server()), false)?;
        fields[Field::Category as usize] = text(
            self,
            &mut std::iter::once(tool.category().unwrap_or_default()),
            false,
        )?;
        fields[Field::Tags as usize] =
            text(self, &mut tool.tags().iter().map(String::as_str), false)?;
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

    /// Counts the words of a tool being indexed.
    pub fn add(&mut self, analyzed: &AnalyzedTool) {
        self.adjust(&entries(analyzed), true);
    }

    /// Uncounts the words of a tool being removed (analysed again: the same text gives the same
    /// numbers). Returns how many (word, field, form) it held: its entries in the inverted index.
    pub fn remove(&mut self, analyzed: &AnalyzedTool) -> usize {
        let entries = entries(analyzed);
        self.adjust(&entries, false);
        entries
            .iter()
            .map(|&e| (e & ((1 << FORM_BITS) - 1)).count_ones() as usize)
            .sum()
    }

    fn adjust(&mut self, entries: &[u32], add: bool) {
        for &entry in entries {
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

/// A tool's words: one entry per (word, field) with the forms it occurs in, sorted.
fn entries(analyzed: &AnalyzedTool) -> Vec<u32> {
    let mut entries = Vec::new();
    for field in Field::ALL {
        let field_bits = (field as u32) << FORM_BITS;
        for token in &analyzed.fields[field as usize] {
            entries.push(token.stem << ID_SHIFT | field_bits | STEM);
            entries.push(token.raw << ID_SHIFT | field_bits | RAW);
        }
    }
    entries.sort_unstable();
    // One entry per (word, field), its form flags merged.
    entries.dedup_by(|next, kept| {
        let same = *next >> FORM_BITS == *kept >> FORM_BITS;
        if same {
            *kept |= *next;
        }
        same
    });
    entries
}

impl AnalyzedTool {
    /// The stems of the name's words, stopwords and bare numbers left out, repeats kept.
    pub fn name_words(&self) -> &[u32] {
        &self.name_words
    }
}

/// Every slot's name words ([`AnalyzedTool::name_words`]) in one vector: a boxed list per slot
/// cost more in pointers and allocator headers than the words themselves. A removed slot's words
/// stay until [`NameWords::compact`].
#[derive(Default)]
pub struct NameWords {
    words: Vec<u32>,
    /// Where each slot's words end in `words`; they start where the slot before ends.
    ends: Vec<u32>,
    /// Words of removed slots still in `words`.
    dead: usize,
}

impl NameWords {
    /// Appends the words of the next slot.
    pub fn push(&mut self, words: &[u32]) {
        self.words.extend_from_slice(words);
        self.ends
            .push(u32::try_from(self.words.len()).unwrap_or(u32::MAX));
    }

    /// The words of `slot` (a removed slot's until the next compaction).
    pub fn get(&self, slot: u32) -> &[u32] {
        let slot = slot as usize;
        let Some(&end) = self.ends.get(slot) else {
            return &[];
        };
        let start = if slot == 0 { 0 } else { self.ends[slot - 1] };
        self.words.get(start as usize..end as usize).unwrap_or(&[])
    }

    /// Notes that `slot` was removed.
    pub fn note_removed(&mut self, slot: u32) {
        self.dead += self.get(slot).len();
    }

    /// Drops the words of every slot `alive` refuses, once they are at least half the words.
    pub fn compact(&mut self, alive: impl Fn(u32) -> bool) {
        if self.dead == 0 || self.dead * 2 < self.words.len() {
            return;
        }
        let mut words = Vec::with_capacity(self.words.len() - self.dead);
        let mut start = 0;
        for (slot, end) in self.ends.iter_mut().enumerate() {
            if alive(slot as u32) {
                words.extend_from_slice(self.words.get(start..*end as usize).unwrap_or(&[]));
            }
            start = *end as usize;
            *end = u32::try_from(words.len()).unwrap_or(u32::MAX);
        }
        self.words = words;
        self.dead = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyzer::Token;
    use serde_json::json;

    fn add(vocabulary: &mut Vocabulary, tool: &Tool) -> AnalyzedTool {
        let analyzed = vocabulary.analyze(&Analyzer::new(), tool).unwrap();
        vocabulary.add(&analyzed);
        analyzed
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
        assert_eq!(
            words(Field::Name),
            expected(&[analyzer.tokens(tool.name())])
        );
        assert_eq!(
            words(Field::Description),
            expected(&[analyzer.content_tokens(tool.description())])
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
        let tags: Vec<_> = tool.tags().iter().map(|t| analyzer.tokens(t)).collect();
        assert_eq!(words(Field::Tags), expected(&tags));
        assert!(words(Field::Tags).iter().any(|(raw, _, _)| raw == "été"));
    }

    #[test]
    fn a_tool_counts_its_words_once_per_field_and_form() {
        let tool = Tool::new("get_documents", "Lists the files").with_server("drive");
        let mut vocabulary = Vocabulary::default();
        let analyzed = add(&mut vocabulary, &tool);
        assert!(vocabulary.contains("document", Field::Name, false));
        assert!(!vocabulary.contains("document", Field::Name, true));
        assert!(vocabulary.contains("documents", Field::Name, true));
        assert!(vocabulary.contains("file", Field::Description, false));
        assert!(!vocabulary.contains("file", Field::Name, false));
        assert!(vocabulary.contains("drive", Field::Server, true));
        // "the" is a stopword: descriptions drop it, and name coverage ignores it.
        assert_eq!(vocabulary.id("the"), None);
        let id = |w: &str| vocabulary.id(w).unwrap();
        assert_eq!(analyzed.name_words(), &[id("get"), id("document")]);
        // Its entries in the index, the server's left out: in the name "get" (stem and written),
        // "document" (stem), "documents" (written); in the description "list", "lists", "file",
        // "files". Every (word, field, form) once.
        let mut again = vocabulary.analyze(&Analyzer::new(), &tool).unwrap();
        again.fields[Field::Server as usize].clear();
        let without_server = vocabulary.remove(&again);
        assert_eq!(without_server, 8);
        assert!(vocabulary.contains("drive", Field::Server, true));
        assert!(!vocabulary.contains("documents", Field::Name, true));
    }

    #[test]
    fn name_words_of_removed_slots_go_once_they_are_half() {
        let mut names = NameWords::default();
        names.push(&[1, 2]);
        names.push(&[]);
        names.push(&[3, 4, 5]);
        assert_eq!(names.get(0), &[1, 2]);
        assert_eq!(names.get(1), &[] as &[u32]);
        assert_eq!(names.get(2), &[3, 4, 5]);
        assert_eq!(names.get(3), &[] as &[u32]);
        names.note_removed(0);
        names.compact(|slot| slot != 0);
        // Two of five words dead: kept until they are half.
        assert_eq!(names.words.len(), 5);
        names.push(&[6]);
        names.note_removed(2);
        names.compact(|slot| slot == 3);
        assert_eq!(names.words, [6]);
        assert_eq!(names.get(0), &[] as &[u32]);
        assert_eq!(names.get(2), &[] as &[u32]);
        assert_eq!(names.get(3), &[6]);
    }

    #[test]
    fn removing_a_tool_uncounts_its_words() {
        let a = Tool::new("send_mail", "Sends mail");
        let b = Tool::new("read_mail", "Reads mail");
        let mut vocabulary = Vocabulary::default();
        let analyzed_a = add(&mut vocabulary, &a);
        add(&mut vocabulary, &b);
        vocabulary.remove(&analyzed_a);
        assert!(!vocabulary.contains("send", Field::Name, false));
        assert!(vocabulary.contains("mail", Field::Name, false));
        assert!(vocabulary.contains("read", Field::Name, true));
        let mut raw_names = Vec::new();
        vocabulary.for_each_raw(&[Field::Name], |w, _| raw_names.push(w.to_string()));
        raw_names.sort();
        assert_eq!(raw_names, ["mail", "read"]);
    }
}
