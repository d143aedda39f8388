//! The inverted index: for every word number, the slots holding the word, field by field and form
//! by form, with how often, and where (stems only: phrases and proximity read positions of stems).
//!
//! BM25F reads, for one query word, its stem and its written form in seven fields: fourteen posting
//! lists in a search library that indexes each field apart, each behind a term-dictionary lookup
//! and block decoding. Here a word's occurrences in every field and form live in one list, found by
//! the word's number, so a query word reads one or two short lists. Slots only grow (a changed
//! server's tools get new slots), so adding a tool appends to each list and keeps it sorted; a
//! removed tool's entries are skipped until enough have piled up to rewrite the lists.

use super::field::{Field, FIELD_COUNT};
use super::terms::{AnalyzedTool, WordToken};

/// One (slot, field, form) of a word: how often the slot holds it there.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub slot: u32,
    /// Occurrences, saturating (a field that repeats one word 65,535 times reads as that many).
    pub freq: u16,
    /// `field * 2 + form` (form 0: stem, 1: as written): entries of a slot are in this order.
    pub key: u8,
}

impl Entry {
    #[cfg(test)]
    pub fn field(self) -> Field {
        Field::ALL[usize::from(self.key >> 1)]
    }

    #[cfg(test)]
    pub fn raw(self) -> bool {
        self.key & 1 == 1
    }
}

pub fn key(field: Field, raw: bool) -> u8 {
    (field as u8) << 1 | u8::from(raw)
}

/// Keys are `field * 2 + form`.
pub const KEY_COUNT: usize = 2 * FIELD_COUNT;

#[derive(Default)]
struct List {
    /// The word as a stem, sorted by (slot, key).
    stems: Vec<Entry>,
    /// Where each stem entry's positions start in `positions` (`freq` of them).
    starts: Vec<u32>,
    positions: Vec<u32>,
    /// The word as written, sorted by (slot, key).
    raws: Vec<Entry>,
}

/// Every word's lists, indexed by word number.
#[derive(Default)]
pub struct Postings {
    lists: Vec<List>,
    /// Entries of removed slots still in the lists, and all entries.
    dead_entries: usize,
    entries: usize,
}

impl Postings {
    /// Adds a tool's words under `slot`, which must be above every slot added before.
    pub fn add(&mut self, slot: u32, analyzed: &AnalyzedTool) {
        let mut stems: Vec<(u32, u32)> = Vec::new();
        let mut raws: Vec<u32> = Vec::new();
        for field in Field::ALL {
            let tokens: &[WordToken] = &analyzed.fields[field as usize];
            if tokens.is_empty() {
                continue;
            }
            stems.clear();
            stems.extend(tokens.iter().map(|t| (t.stem, t.position)));
            stems.sort_unstable();
            for run in stems.chunk_by(|a, b| a.0 == b.0) {
                let list = self.list_mut(run[0].0);
                list.stems.push(Entry {
                    slot,
                    freq: saturate(run.len()),
                    key: key(field, false),
                });
                list.starts.push(position_index(list.positions.len()));
                list.positions
                    .extend(run.iter().take(usize::from(u16::MAX)).map(|&(_, p)| p));
                self.entries += 1;
            }
            raws.clear();
            raws.extend(tokens.iter().map(|t| t.raw));
            raws.sort_unstable();
            for run in raws.chunk_by(|a, b| a == b) {
                self.list_mut(run[0]).raws.push(Entry {
                    slot,
                    freq: saturate(run.len()),
                    key: key(field, true),
                });
                self.entries += 1;
            }
        }
    }

    fn list_mut(&mut self, word: u32) -> &mut List {
        let at = word as usize;
        if self.lists.len() <= at {
            self.lists.resize_with(at + 1, List::default);
        }
        &mut self.lists[at]
    }

    /// Notes that a slot holding `entries` entries was removed; its entries stay until
    /// [`Postings::compact`].
    pub fn note_removed(&mut self, entries: usize) {
        self.dead_entries += entries;
    }

    /// Whether removed slots hold enough of the entries that walking past them costs more than
    /// rewriting the lists.
    pub fn needs_compaction(&self) -> bool {
        self.dead_entries > 0 && self.dead_entries * 4 > self.entries
    }

    /// Drops the entries of every slot `alive` refuses.
    pub fn compact(&mut self, alive: impl Fn(u32) -> bool) {
        for list in &mut self.lists {
            if !list.raws.iter().all(|e| alive(e.slot)) {
                list.raws.retain(|e| alive(e.slot));
                list.raws.shrink_to_fit();
            }
            if list.stems.iter().all(|e| alive(e.slot)) {
                continue;
            }
            let mut stems = Vec::new();
            let mut starts = Vec::new();
            let mut positions = Vec::new();
            for (entry, &start) in list.stems.iter().zip(&list.starts) {
                if alive(entry.slot) {
                    stems.push(*entry);
                    starts.push(position_index(positions.len()));
                    let start = start as usize;
                    positions
                        .extend_from_slice(&list.positions[start..start + usize::from(entry.freq)]);
                }
            }
            list.stems = stems;
            list.starts = starts;
            list.positions = positions;
        }
        self.entries -= self.dead_entries;
        self.dead_entries = 0;
    }

    /// Word `word`'s entries in one form (as a stem, or as written), removed slots included,
    /// sorted by (slot, key).
    pub fn entries(&self, word: u32, raw: bool) -> &[Entry] {
        self.lists.get(word as usize).map_or(&[][..], |l| {
            if raw {
                l.raws.as_slice()
            } else {
                l.stems.as_slice()
            }
        })
    }

    /// Stem `word` slot by slot, to look slots up in (removed slots included).
    pub fn stem_slots(&self, word: u32) -> StemSlots<'_> {
        StemSlots {
            list: self.lists.get(word as usize),
        }
    }
}

/// A word's stem entries, looked up by slot; see [`Postings::stem_slots`].
#[derive(Clone, Copy)]
pub struct StemSlots<'a> {
    list: Option<&'a List>,
}

impl<'a> StemSlots<'a> {
    pub fn len(&self) -> usize {
        self.list.map_or(0, |l| l.stems.len())
    }

    /// The distinct slots, in order.
    pub fn slots(self) -> impl Iterator<Item = u32> + 'a {
        let stems = self.list.map_or(&[][..], |l| l.stems.as_slice());
        stems
            .chunk_by(|a, b| a.slot == b.slot)
            .map(|run| run[0].slot)
    }

    /// Where the slot's entries start, searching from `from` on: the first entry at or past
    /// `slot`.
    pub fn seek(&self, slot: u32, from: usize) -> usize {
        let stems = self.list.map_or(&[][..], |l| l.stems.as_slice());
        let rest = &stems[from.min(stems.len())..];
        // Galloping: most lookups land close to the last one.
        let mut bound = 1;
        while bound < rest.len() && rest[bound].slot < slot {
            bound *= 2;
        }
        let end = bound.min(rest.len());
        from + rest[..end].partition_point(|e| e.slot < slot)
    }

    /// The positions of the stem in `field` for `slot`, its entries starting at `at` (from
    /// [`StemSlots::seek`]).
    pub fn positions(&self, slot: u32, at: usize, field: Field) -> Option<&'a [u32]> {
        let list = self.list?;
        let wanted = key(field, false);
        let at = at.min(list.stems.len());
        list.stems[at..]
            .iter()
            .zip(&list.starts[at..])
            .take_while(|(e, _)| e.slot == slot)
            .find(|(e, _)| e.key == wanted)
            .map(|(e, &start)| {
                let start = start as usize;
                &list.positions[start..start + usize::from(e.freq)]
            })
    }
}

fn saturate(count: usize) -> u16 {
    u16::try_from(count).unwrap_or(u16::MAX)
}

/// Positions are counted in `u32`: a catalog whose stems hold more than 4 billion positions in
/// one word's list stops counting there (and only proximity and phrases read them).
fn position_index(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyzer::Analyzer;
    use crate::search::terms::Vocabulary;
    use crate::tool::Tool;

    fn add(postings: &mut Postings, vocabulary: &mut Vocabulary, slot: u32, tool: &Tool) {
        let analyzed = vocabulary.analyze(&Analyzer::new(), tool).unwrap();
        postings.add(slot, &analyzed);
    }

    fn positions(postings: &Postings, word: u32, field: Field) -> Vec<(u32, Vec<u32>)> {
        let slots = postings.stem_slots(word);
        slots
            .slots()
            .filter_map(|slot| {
                let at = slots.seek(slot, 0);
                Some((slot, slots.positions(slot, at, field)?.to_vec()))
            })
            .collect()
    }

    #[test]
    fn a_word_lists_its_slots_by_field_and_form_with_counts_and_stem_positions() {
        let mut vocabulary = Vocabulary::default();
        let mut postings = Postings::default();
        let files = Tool::new("list_files", "Lists files, then files again");
        let mail = Tool::new("send_mail", "Sends mail with files attached");
        add(&mut postings, &mut vocabulary, 0, &files);
        add(&mut postings, &mut vocabulary, 3, &mail);
        let file = vocabulary.id("file").unwrap();
        let found: Vec<(u32, Field, u16)> = postings
            .entries(file, false)
            .iter()
            .map(|e| (e.slot, e.field(), e.freq))
            .collect();
        assert_eq!(
            found,
            [
                (0, Field::Name, 1),
                (0, Field::Description, 2),
                (3, Field::Description, 1),
            ]
        );
        // "file" is the stem of "files" in both tools, never written as such.
        assert!(postings.entries(file, true).is_empty());
        let files_word = vocabulary.id("files").unwrap();
        assert_eq!(postings.entries(files_word, true).len(), 3);
        assert!(postings.entries(files_word, true).iter().all(|e| e.raw()));
        // "Lists files, then files again": positions 1 and 3.
        assert_eq!(
            positions(&postings, file, Field::Description),
            [(0, vec![1, 3]), (3, vec![3])]
        );
        assert_eq!(positions(&postings, file, Field::Name), [(0, vec![1])]);
        let slots = postings.stem_slots(file);
        assert_eq!(slots.seek(3, 0), 2);
        assert_eq!(slots.seek(1, 0), 2);
        assert_eq!(slots.seek(9, 1), 3);
    }

    #[test]
    fn compaction_drops_removed_slots_and_their_positions() {
        let mut vocabulary = Vocabulary::default();
        let mut postings = Postings::default();
        for (slot, name) in [(0, "read_file"), (1, "write_file"), (2, "file_info")] {
            add(
                &mut postings,
                &mut vocabulary,
                slot,
                &Tool::new(name, "one file"),
            );
        }
        assert!(!postings.needs_compaction());
        postings.note_removed(8);
        postings.note_removed(8);
        assert!(postings.needs_compaction());
        postings.compact(|slot| slot == 2);
        assert!(!postings.needs_compaction());
        let file = vocabulary.id("file").unwrap();
        for raw in [false, true] {
            assert!(postings.entries(file, raw).iter().all(|e| e.slot == 2));
        }
        assert_eq!(positions(&postings, file, Field::Name), [(2, vec![0])]);
        assert_eq!(
            positions(&postings, file, Field::Description),
            [(2, vec![1])]
        );
    }
}
