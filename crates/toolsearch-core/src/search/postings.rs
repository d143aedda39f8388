//! The inverted index: for every word number, the slots holding the word, field by field and form
//! by form, with how often, and where (stems only: phrases and proximity read positions of stems).
//!
//! BM25F reads, for one query word, its stem and its written form in seven fields: fourteen posting
//! lists in a search library that indexes each field apart, each behind a term-dictionary lookup
//! and block decoding. Here a word's occurrences in every field and form live in one list, found by
//! the word's number, so a query word reads one or two short lists. Most words are written as
//! their own stem ("file" in `read_file`): when a word's entry as a stem and its entry as written
//! have the same field and count, the stem entry is flagged to stand for both. Slots only grow (a
//! changed server's tools get new slots), so adding a tool appends to each list and keeps it
//! sorted; a removed tool's entries are skipped until enough have piled up to rewrite the lists.

use super::field::{Field, FIELD_COUNT};
use super::terms::{AnalyzedTool, WordToken, RAW, STEM};

/// One (slot, field, form) of a word: how often the slot holds it there.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub slot: u32,
    /// Occurrences, saturating (a field that repeats one word 65,535 times reads as that many).
    pub freq: u16,
    /// `field * 2 + form` (form 0: stem, 1: as written), plus [`ALSO_WRITTEN`] on a stem entry
    /// that also stands for the word's entry as written in the same field with the same count,
    /// which the word's list as written then leaves out, and [`WIDE_POSITIONS`] on a stem entry
    /// whose positions take two bytes each. Entries of a slot are in key order.
    pub key: u8,
    /// The field's length in the slot (its words), or [`LONG_FIELD`] when it has that many or
    /// more. Scoring reads it here, beside the entry, rather than in a table of every slot's
    /// lengths, a load that misses the cache in a large catalog; the padding had the byte free.
    pub short_length: u8,
}

/// See [`Entry::short_length`]: the field's length is looked up by slot.
pub const LONG_FIELD: u8 = u8::MAX;

// The lists are most of the index's memory: an entry stays 8 bytes.
const _: () = assert!(std::mem::size_of::<Entry>() == 8);

/// See [`Entry::key`].
pub const ALSO_WRITTEN: u8 = 0x80;

/// See [`Entry::key`]: a position from 255 on is kept in two bytes (little-endian), and every
/// position of such an entry with it; the others, most of them, in one.
const WIDE_POSITIONS: u8 = 0x40;

impl Entry {
    /// `field * 2 + form`, an index into [`KEY_COUNT`] weights.
    pub fn form_key(self) -> usize {
        usize::from(self.key & !(ALSO_WRITTEN | WIDE_POSITIONS))
    }

    /// Bytes each of this stem entry's positions takes.
    fn position_width(self) -> usize {
        if self.key & WIDE_POSITIONS != 0 {
            2
        } else {
            1
        }
    }

    /// Bytes this stem entry's positions take.
    fn position_bytes(self) -> usize {
        usize::from(self.freq) * self.position_width()
    }

    pub fn also_written(self) -> bool {
        self.key & ALSO_WRITTEN != 0
    }

    #[cfg(test)]
    pub fn field(self) -> Field {
        Field::ALL[self.form_key() >> 1]
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
    /// Where the positions of every [`CHECKPOINT`]-th stem entry start in `positions`; an entry's
    /// own start adds the bytes of the entries before it since the checkpoint.
    starts: Vec<u32>,
    /// Each stem entry's positions (`freq` of them), in one byte each or, for an entry with
    /// [`WIDE_POSITIONS`], two: in two bytes each they were a seventh of the index, and nearly
    /// all are under 255.
    positions: Vec<u8>,
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
            let short_length = u8::try_from(tokens.len()).unwrap_or(LONG_FIELD);
            stems.clear();
            stems.extend(tokens.iter().map(|t| (t.stem, t.position)));
            stems.sort_unstable();
            for run in stems.chunk_by(|a, b| a.0 == b.0) {
                let list = self.list_mut(run[0].0);
                let run = &run[..run.len().min(usize::from(u16::MAX))];
                // Sorted by (word, position): the run's last position is its largest.
                let wide = run.last().is_some_and(|&(_, p)| p >= u32::from(u8::MAX));
                room(&mut list.stems, 1);
                room(&mut list.positions, run.len() * if wide { 2 } else { 1 });
                if list.stems.len().is_multiple_of(CHECKPOINT) {
                    list.starts.push(position_index(list.positions.len()));
                }
                list.stems.push(Entry {
                    slot,
                    freq: saturate(run.len()),
                    key: key(field, false) | if wide { WIDE_POSITIONS } else { 0 },
                    short_length,
                });
                for &(_, p) in run {
                    let p = u16::try_from(p).unwrap_or(UNKNOWN_POSITION);
                    if wide {
                        list.positions.extend_from_slice(&p.to_le_bytes());
                    } else {
                        // Under 255, as the run's largest is.
                        list.positions.push(p as u8);
                    }
                }
                self.entries += 1;
            }
            raws.clear();
            raws.extend(tokens.iter().map(|t| t.raw));
            raws.sort_unstable();
            for run in raws.chunk_by(|a, b| a == b) {
                self.entries += 1;
                let list = self.list_mut(run[0]);
                let freq = saturate(run.len());
                // This field's stem entries were pushed just above.
                if let Some(stem) = list.stems.last_mut().filter(|stem| {
                    stem.slot == slot
                        && stem.form_key() == usize::from(key(field, false))
                        && stem.freq == freq
                }) {
                    stem.key |= ALSO_WRITTEN;
                    continue;
                }
                room(&mut list.raws, 1);
                list.raws.push(Entry {
                    slot,
                    freq,
                    key: key(field, true),
                    short_length,
                });
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

    /// Whether any entry belongs to a removed slot (none do after [`Postings::compact`], nor
    /// before the first removal): a reader that finds none can skip checking slots.
    pub fn holds_removed(&self) -> bool {
        self.dead_entries > 0
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
            let mut start = 0;
            for entry in &list.stems {
                let end = start + entry.position_bytes();
                if alive(entry.slot) {
                    if stems.len().is_multiple_of(CHECKPOINT) {
                        starts.push(position_index(positions.len()));
                    }
                    stems.push(*entry);
                    positions.extend_from_slice(&list.positions[start..end]);
                }
                start = end;
            }
            list.stems = stems;
            list.starts = starts;
            list.positions = positions;
        }
        self.entries = self.entries.saturating_sub(self.dead_entries);
        self.dead_entries = 0;
    }

    /// Word `word`'s entries as a stem (some [`ALSO_WRITTEN`]), and those as written that no
    /// stem entry stands for; removed slots included, each sorted by (slot, key).
    pub fn entries(&self, word: u32) -> (&[Entry], &[Entry]) {
        self.lists
            .get(word as usize)
            .map_or((&[][..], &[][..]), |l| {
                (l.stems.as_slice(), l.raws.as_slice())
            })
    }

    /// The fields (bit `1 << field`) where `slot` holds `word` in one of `forms` ([`STEM`],
    /// [`RAW`]): the slot's entries, found by binary search, and stem entries that stand for the
    /// word as written too.
    pub fn fields_holding(&self, word: u32, slot: u32, forms: u32) -> u8 {
        let (stems, raws) = self.entries(word);
        let mut fields = 0u8;
        for entry in of_slot(stems, slot) {
            if forms & STEM != 0 || (forms & RAW != 0 && entry.also_written()) {
                fields |= 1 << (entry.form_key() >> 1);
            }
        }
        if forms & RAW != 0 {
            for entry in of_slot(raws, slot) {
                fields |= 1 << (entry.form_key() >> 1);
            }
        }
        fields
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
        self.runs().map(|(slot, _)| slot)
    }

    /// The distinct slots in order, each with where its entries start (what
    /// [`StemSlots::seek`] would find for it).
    pub fn runs(self) -> impl Iterator<Item = (u32, usize)> + 'a {
        let stems = self.list.map_or(&[][..], |l| l.stems.as_slice());
        stems.chunk_by(|a, b| a.slot == b.slot).scan(0, |at, run| {
            let start = *at;
            *at += run.len();
            Some((run[0].slot, start))
        })
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

    /// Whether the entry at `at` (from [`StemSlots::seek`]) is the slot's.
    pub fn holds(&self, slot: u32, at: usize) -> bool {
        self.list
            .and_then(|l| l.stems.get(at))
            .is_some_and(|e| e.slot == slot)
    }

    /// The slot's entries, starting at `at` (from [`StemSlots::seek`]); empty when the word is
    /// not there.
    pub fn slot(&self, slot: u32, at: usize) -> SlotStems<'a> {
        let Some(list) = self.list else {
            return SlotStems::default();
        };
        let at = at.min(list.stems.len());
        let checkpoint = at / CHECKPOINT;
        let Some(&start) = list.starts.get(checkpoint) else {
            return SlotStems::default();
        };
        let before: usize = list.stems[checkpoint * CHECKPOINT..at]
            .iter()
            .map(|e| e.position_bytes())
            .sum();
        let rest = &list.stems[at..];
        let len = rest.iter().take_while(|e| e.slot == slot).count();
        SlotStems {
            entries: &rest[..len],
            positions: list.positions.get(start as usize + before..).unwrap_or(&[]),
        }
    }
}

/// One slot's stem entries for a word, and the positions from its first entry's on.
#[derive(Default)]
pub struct SlotStems<'a> {
    entries: &'a [Entry],
    positions: &'a [u8],
}

impl<'a> SlotStems<'a> {
    /// The positions of the stem in `field`, if the slot holds it there; those past the field's
    /// 65,535th word read [`UNKNOWN_POSITION`].
    pub fn positions(&self, field: Field) -> Option<Positions<'a>> {
        let wanted = usize::from(key(field, false));
        let mut start = 0;
        for entry in self.entries {
            let end = start + entry.position_bytes();
            if entry.form_key() == wanted {
                return self.positions.get(start..end).map(|bytes| Positions {
                    bytes,
                    wide: entry.position_width() == 2,
                });
            }
            start = end;
        }
        None
    }
}

/// A stem entry's positions, in order; see [`SlotStems::positions`].
#[derive(Clone, Copy)]
pub struct Positions<'a> {
    bytes: &'a [u8],
    wide: bool,
}

impl<'a> Positions<'a> {
    pub fn iter(self) -> PositionsIter<'a> {
        if self.wide {
            PositionsIter::Wide(self.bytes.chunks_exact(2))
        } else {
            PositionsIter::Narrow(self.bytes.iter())
        }
    }
}

/// See [`Positions::iter`].
#[derive(Clone)]
pub enum PositionsIter<'a> {
    Narrow(std::slice::Iter<'a, u8>),
    Wide(std::slice::ChunksExact<'a, u8>),
}

impl Iterator for PositionsIter<'_> {
    type Item = u16;

    #[inline]
    fn next(&mut self) -> Option<u16> {
        match self {
            Self::Narrow(bytes) => bytes.next().map(|&p| u16::from(p)),
            Self::Wide(pairs) => pairs
                .next()
                .map(|pair| u16::from_le_bytes([pair[0], pair[1]])),
        }
    }
}

/// The entries of `slot` in a list sorted by slot.
fn of_slot(list: &[Entry], slot: u32) -> &[Entry] {
    let start = list.partition_point(|e| e.slot < slot);
    let len = list[start..].iter().take_while(|e| e.slot == slot).count();
    &list[start..start + len]
}

/// Stem entries between two recorded position starts.
const CHECKPOINT: usize = 8;

/// Makes room for `more` items, growing by half rather than doubling: the lists are most of the
/// index's memory, and most of them are never shrunk.
fn room<T>(list: &mut Vec<T>, more: usize) {
    if list.capacity() - list.len() < more {
        list.reserve_exact(more.max(list.len() / 2).max(4));
    }
}

/// A position a field's word has past the 65,535th: positions are kept in 16 bits (they are a
/// quarter of the index), so phrases and proximity read the first 65,535 words of a field, and
/// skip this one.
pub const UNKNOWN_POSITION: u16 = u16::MAX;

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
                let positions = slots.slot(slot, at).positions(field)?;
                Some((slot, positions.iter().map(u32::from).collect()))
            })
            .collect()
    }

    #[test]
    fn a_slot_holds_a_word_in_the_fields_and_forms_its_entries_say() {
        let mut vocabulary = Vocabulary::default();
        let mut postings = Postings::default();
        let documents = Tool::new("get_documents", "Lists the files").with_server("drive");
        let drive = Tool::new("drive_document", "The document of a drive");
        add(&mut postings, &mut vocabulary, 1, &documents);
        add(&mut postings, &mut vocabulary, 4, &drive);
        let id = |w: &str| vocabulary.id(w).unwrap();
        let bit = |f: Field| 1u8 << f as u8;
        let (document, documents_word) = (id("document"), id("documents"));
        assert_eq!(postings.fields_holding(document, 1, STEM), bit(Field::Name));
        assert_eq!(postings.fields_holding(document, 1, RAW), 0);
        assert_eq!(
            postings.fields_holding(documents_word, 1, RAW),
            bit(Field::Name)
        );
        assert_eq!(postings.fields_holding(documents_word, 1, STEM), 0);
        // "document" is written as its stem in slot 4: the stem entry stands for both forms.
        let both = bit(Field::Name) | bit(Field::Description);
        assert_eq!(postings.fields_holding(document, 4, RAW), both);
        assert_eq!(postings.fields_holding(document, 4, STEM | RAW), both);
        assert_eq!(
            postings.fields_holding(id("drive"), 1, STEM | RAW),
            bit(Field::Server)
        );
        assert_eq!(postings.fields_holding(id("drive"), 4, RAW), both);
        // Slots between, before and after hold nothing.
        for slot in [0, 2, 3, 5] {
            assert_eq!(postings.fields_holding(document, slot, STEM | RAW), 0);
        }
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
            .entries(file)
            .0
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
        assert!(postings.entries(file).0.iter().all(|e| !e.also_written()));
        assert!(postings.entries(file).1.is_empty());
        let files_word = vocabulary.id("files").unwrap();
        assert!(postings.entries(files_word).0.is_empty());
        assert_eq!(postings.entries(files_word).1.len(), 3);
        assert!(postings.entries(files_word).1.iter().all(|e| e.raw()));
        // "mail" is written as its stem: one entry stands for both forms.
        let mail_word = vocabulary.id("mail").unwrap();
        let (stems, raws) = postings.entries(mail_word);
        assert_eq!(stems.len(), 2);
        assert!(stems.iter().all(|e| e.also_written()));
        assert!(raws.is_empty());
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
    fn large_counts_and_their_positions_are_read_back_through_compaction() {
        let mut vocabulary = Vocabulary::default();
        let mut postings = Postings::default();
        // Tool i holds "file" in its name and `repeats(i)` times in its description, up to 300
        // times, across several checkpoints.
        let repeats = |i: u32| [0, 1, 7, 8, 130, 300][(i % 6) as usize];
        let count = 5 * CHECKPOINT as u32 + 3;
        for i in 0..count {
            let description = vec!["file"; repeats(i) as usize].join(" ");
            let tool = Tool::new(format!("file_{i}"), format!("{description} tail"));
            add(&mut postings, &mut vocabulary, i, &tool);
        }
        let file = vocabulary.id("file").unwrap();
        let check = |postings: &Postings, kept: &dyn Fn(u32) -> bool| {
            let counts: Vec<(u32, u16)> = postings
                .entries(file)
                .0
                .iter()
                .filter(|e| e.field() == Field::Description)
                .map(|e| (e.slot, e.freq))
                .collect();
            let expected: Vec<(u32, u16)> = (0..count)
                .filter(|&i| kept(i) && repeats(i) > 0)
                .map(|i| (i, repeats(i) as u16))
                .collect();
            assert_eq!(counts, expected);
            let found = positions(postings, file, Field::Description);
            let expected: Vec<(u32, Vec<u32>)> = (0..count)
                .filter(|&i| kept(i) && repeats(i) > 0)
                .map(|i| (i, (0..repeats(i)).collect()))
                .collect();
            assert_eq!(found, expected);
            // The name's entry follows each description's, and reads its own position.
            let names = positions(postings, file, Field::Name);
            assert!(names.iter().all(|(_, p)| p == &[0]));
            assert_eq!(names.len(), (0..count).filter(|&i| kept(i)).count());
        };
        check(&postings, &|_| true);
        postings.note_removed(1);
        postings.compact(|slot| slot % 4 != 1);
        check(&postings, &|i| i % 4 != 1);
    }

    #[test]
    fn slots_past_65536_are_found_apart_from_those_sharing_their_low_bits() {
        let mut vocabulary = Vocabulary::default();
        let mut postings = Postings::default();
        // Written while trying entries that keep a slot's low 16 bits only (not kept: see
        // BENCHMARKS); it holds for today's lists and guards the next attempt.
        // 5 and 65,541 share their low 16 bits, and are neighbours in every list.
        let slots = [3u32, 5, 65_541, 65_542, 200_000, 200_001];
        // Each tool holds "file" in its name, and this many times in its description.
        let counts = [2usize, 0, 1, 3, 4, 5];
        for (&slot, &count) in slots.iter().zip(&counts) {
            let description = vec!["file"; count].join(" ");
            let tool = Tool::new(format!("file_{slot}"), format!("{description} tail"));
            add(&mut postings, &mut vocabulary, slot, &tool);
        }
        let file = vocabulary.id("file").unwrap();
        let bit = |f: Field| 1u8 << f as u8;
        let check = |postings: &Postings, live: &[(usize, u32)]| {
            let listed: Vec<u32> = postings.stem_slots(file).slots().collect();
            assert_eq!(listed, live.iter().map(|&(_, s)| s).collect::<Vec<_>>());
            for &(count, slot) in live {
                let fields = if count == 0 {
                    bit(Field::Name)
                } else {
                    bit(Field::Name) | bit(Field::Description)
                };
                assert_eq!(postings.fields_holding(file, slot, STEM), fields, "{slot}");
                let stems = postings.stem_slots(file);
                let at = stems.seek(slot, 0);
                assert!(stems.holds(slot, at));
                assert_eq!(stems.seek(slot, at.saturating_sub(1)), at);
            }
            for absent in [0, 4, 6, 65_540, 65_543, 199_999, 300_000] {
                assert_eq!(postings.fields_holding(file, absent, STEM | RAW), 0);
                let stems = postings.stem_slots(file);
                assert!(!stems.holds(absent, stems.seek(absent, 0)));
            }
            let expected: Vec<(u32, Vec<u32>)> = live
                .iter()
                .filter(|&&(count, _)| count > 0)
                .map(|&(count, slot)| (slot, (0..count as u32).collect()))
                .collect();
            assert_eq!(positions(postings, file, Field::Description), expected);
        };
        let all: Vec<(usize, u32)> = counts.iter().copied().zip(slots).collect();
        check(&postings, &all);
        postings.note_removed(2);
        postings.compact(|slot| slot != 5 && slot != 200_000);
        let kept: Vec<(usize, u32)> = all
            .iter()
            .copied()
            .filter(|&(_, s)| s != 5 && s != 200_000)
            .collect();
        check(&postings, &kept);
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
        let (stems, raws) = postings.entries(file);
        assert!(stems.iter().chain(raws).all(|e| e.slot == 2));
        assert_eq!(positions(&postings, file, Field::Name), [(2, vec![0])]);
        assert_eq!(
            positions(&postings, file, Field::Description),
            [(2, vec![1])]
        );
    }

    #[test]
    fn positions_are_found_past_many_entries_and_after_compaction() {
        let mut vocabulary = Vocabulary::default();
        let mut postings = Postings::default();
        // Tool i repeats "file" i % 4 + 1 times in its description, after i % 3 other words.
        let description = |i: usize| {
            let lead = ["alpha", "beta", "gamma"][..i % 3].join(" ");
            format!("{lead} {}", vec!["file"; i % 4 + 1].join(" "))
        };
        let expected = |i: usize| -> Vec<u32> {
            let lead = (i % 3) as u32;
            (0..(i % 4 + 1) as u32).map(|k| lead + k).collect()
        };
        for i in 0..5 * CHECKPOINT {
            let tool = Tool::new(format!("file_{i}"), description(i));
            add(&mut postings, &mut vocabulary, i as u32, &tool);
        }
        let file = vocabulary.id("file").unwrap();
        let found = positions(&postings, file, Field::Description);
        let wanted: Vec<(u32, Vec<u32>)> = (0..5 * CHECKPOINT)
            .map(|i| (i as u32, expected(i)))
            .collect();
        assert_eq!(found, wanted);
        postings.note_removed(1);
        postings.compact(|slot| slot % 3 != 0);
        let found = positions(&postings, file, Field::Description);
        let wanted: Vec<(u32, Vec<u32>)> = (0..5 * CHECKPOINT)
            .filter(|i| i % 3 != 0)
            .map(|i| (i as u32, expected(i)))
            .collect();
        assert_eq!(found, wanted);
    }
}
