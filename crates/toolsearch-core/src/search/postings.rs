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
//!
//! The lists are most of the index's memory, so an entry is kept in four bytes ([`Packed`]): the
//! slot's low 16 bits (the high ones are where the list's runs of slots with the same high bits
//! start, [`Postings::highs`]), the key with the count beside it when it is under 8 (all but about
//! one entry in a thousand; the rest are counted apart), and the field's short length. Every
//! entry stays the same size, so lookups by slot are binary searches and a walk through a list
//! decodes each entry on its own.

use std::ops::Range;

use rustc_hash::FxHashMap;

use super::field::{Field, FIELD_COUNT};
use super::terms::{AnalyzedTool, WordToken, RAW, STEM};

/// One (slot, field, form) of a word, read back from its list: how often the slot holds it there.
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
    /// lengths, a load that misses the cache in a large catalog.
    pub short_length: u8,
}

/// See [`Entry::short_length`]: the field's length is looked up by slot.
pub const LONG_FIELD: u8 = u8::MAX;

/// See [`Entry::key`].
pub const ALSO_WRITTEN: u8 = 0x80;

/// See [`Entry::key`]: a position from 255 on is kept in two bytes (little-endian), and every
/// position of such an entry with it; the others, most of them, in one.
const WIDE_POSITIONS: u8 = 0x40;

impl Entry {
    /// `field * 2 + form`, an index into [`KEY_COUNT`] weights.
    pub fn form_key(self) -> usize {
        usize::from(self.key & FORM_BITS)
    }

    /// Bytes this stem entry's positions take.
    fn position_bytes(self) -> usize {
        position_bytes(self.freq, self.key & WIDE_POSITIONS != 0)
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

/// The bits of a key that hold `field * 2 + form`.
const FORM_BITS: u8 = 0x0F;
const _: () = assert!(KEY_COUNT <= FORM_BITS as usize + 1);

/// An entry as its list keeps it; see the module's comment.
#[derive(Debug, Clone, Copy)]
struct Packed {
    /// The slot's low 16 bits.
    low: u16,
    /// The entry's form key and [`ALSO_WRITTEN`], and in [`COUNT_BITS`] its count, or 0 when the
    /// count is in [`Postings::apart`] (from [`INLINE_COUNTS`] on, or a stem entry whose
    /// positions are wide).
    key: u8,
    short_length: u8,
}

const _: () = assert!(std::mem::size_of::<Packed>() == 4);

const COUNT_BITS: u8 = 0x70;
const COUNT_SHIFT: u32 = 4;
/// Counts under this are kept in the entry.
const INLINE_COUNTS: u16 = 8;

/// The count of an entry whose own bits could not hold it.
#[derive(Debug, Clone, Copy)]
struct Apart {
    freq: u16,
    wide: bool,
}

/// Where a list's entry is counted apart: its word, form and place in the list.
fn apart_key(word: u32, raw: bool, at: usize) -> u64 {
    // A list stays under 2^32 entries: at four bytes each that is 16 GiB of one word.
    u64::from(word) << 33 | u64::from(raw) << 32 | (at as u64 & u64::from(u32::MAX))
}

/// A list's place number, kept in 32 bits (see [`apart_key`]).
fn place(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

#[derive(Default)]
struct List {
    /// The word as a stem, sorted by (slot, key).
    stems: Vec<Packed>,
    /// Where the positions of every [`CHECKPOINT`]-th stem entry start in `positions`; an entry's
    /// own start adds the bytes of the entries before it since the checkpoint.
    starts: Vec<u32>,
    /// Each stem entry's positions (`freq` of them), in one byte each or, for an entry with
    /// [`WIDE_POSITIONS`], two: in two bytes each they were a seventh of the index, and nearly
    /// all are under 255.
    positions: Vec<u8>,
    /// The word as written, sorted by (slot, key).
    raws: Vec<Packed>,
    /// The high bits (`slot >> 16`) of the word's last slot, in either form: the rows of
    /// [`Postings::highs`] up to it are the word's.
    high: u16,
}

/// Every word's lists, indexed by word number.
#[derive(Default)]
pub struct Postings {
    lists: Vec<List>,
    /// `highs[h - 1][word]`: where the word's stem and written lists reach slots whose high bits
    /// are `h` or more, for `h` up to the list's [`List::high`]. One row of every word for each
    /// 65,536 slots, rather than a table in each list: most lists never pass a few runs, and
    /// the index's tables by slot grow faster than this as slots are used.
    highs: Vec<Vec<[u32; 2]>>,
    /// The counts entries could not hold, by [`apart_key`].
    apart: FxHashMap<u64, Apart>,
    /// Entries of removed slots still in the lists, and all entries.
    dead_entries: usize,
    entries: usize,
}

/// The lists' parts an entry is written to, borrowed apart from the lists themselves.
struct Runs<'a> {
    highs: &'a mut Vec<Vec<[u32; 2]>>,
    apart: &'a mut FxHashMap<u64, Apart>,
}

impl Runs<'_> {
    /// Appends `entry` (its slot at or past every slot in the list) to word `word`'s list.
    #[inline]
    fn push(&mut self, list: &mut List, word: u32, raw: bool, entry: Entry) {
        // Slots stay under 2^31, so their high bits fit.
        let high = u16::try_from(entry.slot >> 16).unwrap_or(u16::MAX);
        if high > list.high {
            let at = [place(list.stems.len()), place(list.raws.len())];
            for h in usize::from(list.high) + 1..=usize::from(high) {
                if self.highs.len() < h {
                    self.highs.resize_with(h, Vec::new);
                }
                let row = &mut self.highs[h - 1];
                if row.len() <= word as usize {
                    row.resize(word as usize + 1, [0, 0]);
                }
                row[word as usize] = at;
            }
            list.high = high;
        }
        let entries = if raw { &mut list.raws } else { &mut list.stems };
        let wide = entry.key & WIDE_POSITIONS != 0;
        let count = if entry.freq < INLINE_COUNTS && !wide {
            entry.freq as u8
        } else {
            let apart = Apart {
                freq: entry.freq,
                wide,
            };
            self.apart
                .insert(apart_key(word, raw, entries.len()), apart);
            0
        };
        room(entries, 1);
        entries.push(Packed {
            low: entry.slot as u16,
            key: entry.key & (FORM_BITS | ALSO_WRITTEN) | count << COUNT_SHIFT,
            short_length: entry.short_length,
        });
    }
}

impl Postings {
    /// Adds a tool's words under `slot`, which must be above every slot added before.
    pub fn add(&mut self, slot: u32, analyzed: &AnalyzedTool) {
        let mut stems: Vec<(u32, u32)> = Vec::new();
        let mut raws: Vec<u32> = Vec::new();
        let Self {
            lists,
            highs,
            apart,
            entries,
            ..
        } = self;
        let mut runs = Runs { highs, apart };
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
                let word = run[0].0;
                let list = list_mut(lists, word);
                let run = &run[..run.len().min(usize::from(u16::MAX))];
                // Sorted by (word, position): the run's last position is its largest.
                let wide = run.last().is_some_and(|&(_, p)| p >= u32::from(u8::MAX));
                room(&mut list.positions, run.len() * if wide { 2 } else { 1 });
                if list.stems.len().is_multiple_of(CHECKPOINT) {
                    list.starts.push(position_index(list.positions.len()));
                }
                let entry = Entry {
                    slot,
                    freq: saturate(run.len()),
                    key: key(field, false) | if wide { WIDE_POSITIONS } else { 0 },
                    short_length,
                };
                runs.push(list, word, false, entry);
                for &(_, p) in run {
                    let p = u16::try_from(p).unwrap_or(UNKNOWN_POSITION);
                    if wide {
                        list.positions.extend_from_slice(&p.to_le_bytes());
                    } else {
                        // Under 255, as the run's largest is.
                        list.positions.push(p as u8);
                    }
                }
                *entries += 1;
            }
            raws.clear();
            raws.extend(tokens.iter().map(|t| t.raw));
            raws.sort_unstable();
            for run in raws.chunk_by(|a, b| a == b) {
                *entries += 1;
                let word = run[0];
                let freq = saturate(run.len());
                // The word's last stem entry is this field's exactly when the field holds its
                // stem: those were pushed just above.
                let stem_freq = {
                    let from = stems.partition_point(|&(s, _)| s < word);
                    let to = stems.partition_point(|&(s, _)| s <= word);
                    saturate(to - from)
                };
                let list = list_mut(lists, word);
                if stem_freq == freq {
                    if let Some(stem) = list.stems.last_mut() {
                        stem.key |= ALSO_WRITTEN;
                        continue;
                    }
                }
                let entry = Entry {
                    slot,
                    freq,
                    key: key(field, true),
                    short_length,
                };
                runs.push(list, word, true, entry);
            }
        }
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
        let Self {
            lists,
            highs,
            apart,
            ..
        } = self;
        for (word, list) in lists.iter_mut().enumerate() {
            let word = word as u32;
            let (stems, raws) = {
                let view = |raw| Column::of(Some(list), highs, apart, word, raw);
                let (stems, raws) = (view(false), view(true));
                if stems.iter().chain(raws.iter()).all(|e| alive(e.slot)) {
                    continue;
                }
                (
                    stems.iter().collect::<Vec<_>>(),
                    raws.iter().collect::<Vec<_>>(),
                )
            };
            for (raw, packed) in [(false, &list.stems), (true, &list.raws)] {
                for (at, _) in packed
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.key & COUNT_BITS == 0)
                {
                    apart.remove(&apart_key(word, raw, at));
                }
            }
            let old = std::mem::take(list);
            let mut runs = Runs {
                highs: &mut *highs,
                apart: &mut *apart,
            };
            // Both forms in slot order, as they were added: a run of high bits starts in both
            // lists where the first entry of either reaches it.
            let mut raws = raws.into_iter().peekable();
            let mut start = 0;
            for entry in stems {
                while let Some(raw) = raws.next_if(|raw| raw.slot < entry.slot) {
                    if alive(raw.slot) {
                        runs.push(list, word, true, raw);
                    }
                }
                let end = start + entry.position_bytes();
                if alive(entry.slot) {
                    if list.stems.len().is_multiple_of(CHECKPOINT) {
                        list.starts.push(position_index(list.positions.len()));
                    }
                    runs.push(list, word, false, entry);
                    list.positions.extend_from_slice(&old.positions[start..end]);
                }
                start = end;
            }
            for raw in raws.filter(|raw| alive(raw.slot)) {
                runs.push(list, word, true, raw);
            }
            list.stems.shrink_to_fit();
            list.raws.shrink_to_fit();
            list.positions.shrink_to_fit();
        }
        self.entries = self.entries.saturating_sub(self.dead_entries);
        self.dead_entries = 0;
    }

    /// Word `word`'s entries as a stem (some [`ALSO_WRITTEN`]), and those as written that no
    /// stem entry stands for; removed slots included, each sorted by (slot, key).
    pub fn entries(&self, word: u32) -> (Column<'_>, Column<'_>) {
        let list = self.lists.get(word as usize);
        let view = |raw| Column::of(list, &self.highs, &self.apart, word, raw);
        (view(false), view(true))
    }

    /// The fields (bit `1 << field`) where `slot` holds `word` in one of `forms` ([`STEM`],
    /// [`RAW`]): the slot's entries, found by binary search, and stem entries that stand for the
    /// word as written too.
    pub fn fields_holding(&self, word: u32, slot: u32, forms: u32) -> u8 {
        let (stems, raws) = self.entries(word);
        let mut fields = 0u8;
        for at in stems.of_slot(slot) {
            let packed = stems.packed[at];
            if forms & STEM != 0 || (forms & RAW != 0 && packed.key & ALSO_WRITTEN != 0) {
                fields |= 1 << ((packed.key & FORM_BITS) >> 1);
            }
        }
        if forms & RAW != 0 {
            for at in raws.of_slot(slot) {
                fields |= 1 << ((raws.packed[at].key & FORM_BITS) >> 1);
            }
        }
        fields
    }

    /// Stem `word` slot by slot, to look slots up in (removed slots included).
    pub fn stem_slots(&self, word: u32) -> StemSlots<'_> {
        let list = self.lists.get(word as usize);
        StemSlots {
            list,
            stems: Column::of(list, &self.highs, &self.apart, word, false),
        }
    }
}

fn list_mut(lists: &mut Vec<List>, word: u32) -> &mut List {
    let at = word as usize;
    if lists.len() <= at {
        lists.resize_with(at + 1, List::default);
    }
    &mut lists[at]
}

/// Bytes `freq` positions take, two each when `wide`.
fn position_bytes(freq: u16, wide: bool) -> usize {
    usize::from(freq) * if wide { 2 } else { 1 }
}

/// An entry's count and whether its positions are wide, from its bits or, when they hold none,
/// from `apart`.
#[inline]
fn count(packed: Packed, apart: impl FnOnce() -> (u16, bool)) -> (u16, bool) {
    match (packed.key & COUNT_BITS) >> COUNT_SHIFT {
        0 => apart(),
        count => (u16::from(count), false),
    }
}

/// One of a word's lists (its stems, or its forms as written), read entry by entry.
#[derive(Clone, Copy)]
pub struct Column<'a> {
    packed: &'a [Packed],
    highs: &'a [Vec<[u32; 2]>],
    apart: &'a FxHashMap<u64, Apart>,
    word: u32,
    raw: bool,
    /// The high bits of the list's last slot: runs go from 0 to this.
    top: u32,
    /// Where the run of high bits 1 starts (the list's length when there is none): read once
    /// here, since most lists have two runs at most.
    second: usize,
}

impl<'a> Column<'a> {
    fn of(
        list: Option<&'a List>,
        highs: &'a [Vec<[u32; 2]>],
        apart: &'a FxHashMap<u64, Apart>,
        word: u32,
        raw: bool,
    ) -> Self {
        let packed = list.map_or(&[][..], |l| {
            if raw {
                l.raws.as_slice()
            } else {
                l.stems.as_slice()
            }
        });
        let top = list.map_or(0, |l| u32::from(l.high));
        let second = if top == 0 {
            packed.len()
        } else {
            highs[0][word as usize][usize::from(raw)] as usize
        };
        Self {
            packed,
            highs,
            apart,
            word,
            raw,
            top,
            second,
        }
    }

    pub fn len(&self) -> usize {
        self.packed.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.packed.is_empty()
    }

    /// Where the run of slots with high bits `high` starts.
    #[inline]
    fn run_start(&self, high: u32) -> usize {
        if high == 0 {
            0
        } else if high > self.top {
            self.packed.len()
        } else if high == 1 {
            self.second
        } else {
            let row = &self.highs[high as usize - 1];
            row[self.word as usize][usize::from(self.raw)] as usize
        }
    }

    /// The entries whose slots have high bits `high`.
    #[inline]
    fn run(&self, high: u32) -> Range<usize> {
        if high == 0 {
            0..self.second
        } else {
            self.run_start(high)..self.run_start(high + 1)
        }
    }

    /// The count of the entry at `at`, and whether its positions are wide.
    #[inline]
    fn count(&self, at: usize) -> (u16, bool) {
        count(self.packed[at], || self.count_apart(at))
    }

    #[cold]
    fn count_apart(&self, at: usize) -> (u16, bool) {
        self.apart
            .get(&apart_key(self.word, self.raw, at))
            .map_or((1, false), |a| (a.freq, a.wide))
    }

    /// The entry at `at`, whose slot has high bits `high`.
    #[inline]
    fn decode(&self, at: usize, high: u32) -> Entry {
        let packed = self.packed[at];
        let (freq, wide) = self.count(at);
        Entry {
            slot: high << 16 | u32::from(packed.low),
            freq,
            key: packed.key & (FORM_BITS | ALSO_WRITTEN) | if wide { WIDE_POSITIONS } else { 0 },
            short_length: packed.short_length,
        }
    }

    /// Every entry, in order.
    #[inline]
    pub fn for_each(&self, mut visit: impl FnMut(Entry)) {
        for high in 0..=self.top {
            let run = self.run(high);
            let base = high << 16;
            let first = run.start;
            for (i, &packed) in self.packed[run].iter().enumerate() {
                let (freq, _) = count(packed, || self.count_apart(first + i));
                visit(Entry {
                    slot: base | u32::from(packed.low),
                    freq,
                    // Scoring reads no positions: the width is left out.
                    key: packed.key & (FORM_BITS | ALSO_WRITTEN),
                    short_length: packed.short_length,
                });
            }
        }
    }

    /// Every entry, in order.
    pub fn iter(self) -> impl Iterator<Item = Entry> + 'a {
        (0..=self.top).flat_map(move |high| self.run(high).map(move |at| self.decode(at, high)))
    }

    /// The first entry at or past `from` whose slot is at or past `slot`.
    #[inline]
    pub fn seek(&self, slot: u32, from: usize) -> usize {
        let high = slot >> 16;
        let run = self.run(high);
        if from >= run.end {
            return from.min(self.packed.len());
        }
        let start = from.max(run.start);
        let rest = &self.packed[start..run.end];
        let low = slot as u16;
        // Galloping: most lookups land close to the last one.
        let mut bound = 1;
        while bound < rest.len() && rest[bound].low < low {
            bound *= 2;
        }
        let end = bound.min(rest.len());
        start + rest[..end].partition_point(|e| e.low < low)
    }

    /// Whether the entry at `at` is the slot's.
    #[inline]
    pub fn holds(&self, slot: u32, at: usize) -> bool {
        self.run(slot >> 16).contains(&at) && self.packed[at].low == slot as u16
    }

    /// The entries of `slot`.
    fn of_slot(&self, slot: u32) -> Range<usize> {
        let (run, low) = (self.run(slot >> 16), slot as u16);
        let entries = &self.packed[run.clone()];
        let start = entries.partition_point(|e| e.low < low);
        let len = entries[start..].iter().take_while(|e| e.low == low).count();
        run.start + start..run.start + start + len
    }
}

/// A word's stem entries, looked up by slot; see [`Postings::stem_slots`].
#[derive(Clone, Copy)]
pub struct StemSlots<'a> {
    list: Option<&'a List>,
    stems: Column<'a>,
}

impl<'a> StemSlots<'a> {
    pub fn len(&self) -> usize {
        self.stems.len()
    }

    /// The distinct slots, in order.
    pub fn slots(self) -> impl Iterator<Item = u32> + 'a {
        self.runs().map(|(slot, _)| slot)
    }

    /// The distinct slots in order, each with where its entries start (what
    /// [`StemSlots::seek`] would find for it).
    pub fn runs(self) -> SlotRuns<'a> {
        let stems = self.stems;
        SlotRuns {
            stems,
            rest: &stems.packed[stems.run(0)],
            start: 0,
            high: 0,
        }
    }

    /// Where the slot's entries start, searching from `from` on: the first entry at or past
    /// `slot`.
    #[inline]
    pub fn seek(&self, slot: u32, from: usize) -> usize {
        self.stems.seek(slot, from)
    }

    /// Whether the entry at `at` (from [`StemSlots::seek`]) is the slot's.
    #[inline]
    pub fn holds(&self, slot: u32, at: usize) -> bool {
        self.stems.holds(slot, at)
    }

    /// The fields holding the word in the slot whose entries start at `at` (from
    /// [`StemSlots::seek`]), as bits `1 << field`: read from the entries alone, without finding
    /// their positions.
    #[inline]
    pub fn fields_at(&self, slot: u32, at: usize) -> u8 {
        let low = slot as u16;
        let run = self.stems.run(slot >> 16);
        if !run.contains(&at) {
            return 0;
        }
        self.stems.packed[at..run.end]
            .iter()
            .take_while(|e| e.low == low)
            .fold(0, |bits, e| bits | 1 << ((e.key & FORM_BITS) >> 1))
    }

    /// The slot's entries, starting at `at` (from [`StemSlots::seek`]); empty when the word is
    /// not there.
    pub fn slot(&self, slot: u32, at: usize) -> SlotStems<'a> {
        let Some(list) = self.list else {
            return SlotStems::default();
        };
        let stems = self.stems;
        let low = slot as u16;
        let run = stems.run(slot >> 16);
        if !run.contains(&at) {
            return SlotStems::default();
        }
        let checkpoint = at / CHECKPOINT;
        let Some(&start) = list.starts.get(checkpoint) else {
            return SlotStems::default();
        };
        let before: usize = (checkpoint * CHECKPOINT..at)
            .map(|i| {
                let (freq, wide) = stems.count(i);
                position_bytes(freq, wide)
            })
            .sum();
        let len = stems.packed[at..run.end]
            .iter()
            .take_while(|e| e.low == low)
            .count();
        SlotStems {
            stems: Some(stems),
            entries: &stems.packed[at..at + len],
            first: at,
            positions: list.positions.get(start as usize + before..).unwrap_or(&[]),
        }
    }
}

/// See [`StemSlots::runs`].
pub struct SlotRuns<'a> {
    stems: Column<'a>,
    /// What is left of the run of slots with high bits `high`, which starts at `start`.
    rest: &'a [Packed],
    start: usize,
    high: u32,
}

impl Iterator for SlotRuns<'_> {
    type Item = (u32, usize);

    #[inline(always)]
    fn next(&mut self) -> Option<(u32, usize)> {
        while self.rest.is_empty() {
            if self.high >= self.stems.top {
                return None;
            }
            self.high += 1;
            let run = self.stems.run(self.high);
            self.start = run.start;
            self.rest = &self.stems.packed[run];
        }
        let low = self.rest[0].low;
        let len = 1 + self.rest[1..].iter().take_while(|e| e.low == low).count();
        let start = self.start;
        self.rest = &self.rest[len..];
        self.start += len;
        Some((self.high << 16 | u32::from(low), start))
    }
}

/// One slot's stem entries for a word, and the positions from its first entry's on.
#[derive(Default)]
pub struct SlotStems<'a> {
    stems: Option<Column<'a>>,
    /// The slot's entries, the first at `first` in the list.
    entries: &'a [Packed],
    first: usize,
    positions: &'a [u8],
}

impl<'a> SlotStems<'a> {
    /// The positions of the stem in `field`, if the slot holds it there; those past the field's
    /// 65,535th word read [`UNKNOWN_POSITION`].
    pub fn positions(&self, field: Field) -> Option<Positions<'a>> {
        self.fields()
            .find(|&(held, _)| held == field)
            .map(|(_, positions)| positions)
    }

    /// The fields holding the stem, in order, each with its positions.
    pub fn fields(&self) -> impl Iterator<Item = (Field, Positions<'a>)> + '_ {
        let stems = self.stems;
        let mut start = 0;
        self.entries
            .iter()
            .enumerate()
            .map_while(move |(i, &packed)| {
                let apart = || stems.map_or((1, false), |s| s.count_apart(self.first + i));
                let (freq, wide) = count(packed, apart);
                let end = start + position_bytes(freq, wide);
                let bytes = self.positions.get(start..end)?;
                start = end;
                let field = Field::ALL[usize::from(packed.key & FORM_BITS) >> 1];
                Some((field, Positions { bytes, wide }))
            })
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
        // Entries keep a slot's low 16 bits only; the runs of high bits tell these apart.
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
            // 134,464 has 200,000's low bits, and no slot shares its high ones.
            for absent in [0, 4, 6, 65_540, 65_543, 134_464, 199_999, 300_000] {
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
    fn counts_the_entries_cannot_hold_are_read_back_in_every_form_and_run() {
        let mut vocabulary = Vocabulary::default();
        let mut postings = Postings::default();
        // Slots in three runs of high bits (0, 1 and 3; none in 2). Tool k repeats "file" (its
        // own stem: one entry for both forms) and "files" (only as written) `counts[k]` times,
        // across the largest count kept in an entry's bits.
        let slots = [1u32, 2, 65_536, 65_537, 196_608, 196_620];
        let counts = [7usize, 8, 9, 1, 300, 8];
        for (&slot, &count) in slots.iter().zip(&counts) {
            let words = ["file files"; 1].repeat(count).join(" ");
            let tool = Tool::new(format!("tool_{slot}"), words);
            add(&mut postings, &mut vocabulary, slot, &tool);
        }
        let (file, files) = (
            vocabulary.id("file").unwrap(),
            vocabulary.id("files").unwrap(),
        );
        let check = |postings: &Postings, live: &[(u32, usize)]| {
            let described = |(stems, raws): (Column<'_>, Column<'_>)| {
                let keep = |e: &Entry| e.field() == Field::Description;
                let stems: Vec<(u32, u16, bool)> = stems
                    .iter()
                    .filter(keep)
                    .map(|e| (e.slot, e.freq, e.also_written()))
                    .collect();
                let raws: Vec<(u32, u16)> =
                    raws.iter().filter(keep).map(|e| (e.slot, e.freq)).collect();
                (stems, raws)
            };
            let as_u16 = |count: usize| count as u16;
            let (file_stems, file_raws) = described(postings.entries(file));
            let expected: Vec<(u32, u16, bool)> = live
                .iter()
                .map(|&(slot, count)| (slot, as_u16(2 * count), false))
                .collect();
            // "file" and "files" share the stem: twice the count, standing for neither form.
            assert_eq!(file_stems, expected);
            let expected: Vec<(u32, u16)> = live
                .iter()
                .map(|&(slot, count)| (slot, as_u16(count)))
                .collect();
            assert_eq!(file_raws, expected);
            assert_eq!(described(postings.entries(files)).1, expected);
            let found = positions(postings, file, Field::Description);
            let expected: Vec<(u32, Vec<u32>)> = live
                .iter()
                .map(|&(slot, count)| (slot, (0..2 * count as u32).collect()))
                .collect();
            assert_eq!(found, expected);
            for &(slot, _) in live {
                let description = 1u8 << Field::Description as u8;
                assert_eq!(postings.fields_holding(files, slot, RAW), description);
            }
        };
        let all: Vec<(u32, usize)> = slots.iter().copied().zip(counts).collect();
        check(&postings, &all);
        postings.note_removed(1);
        postings.compact(|slot| slot != 2 && slot != 65_537);
        let kept: Vec<(u32, usize)> = all
            .iter()
            .copied()
            .filter(|&(slot, _)| slot != 2 && slot != 65_537)
            .collect();
        check(&postings, &kept);
        // A tool added after compaction, in a run above every other, is counted as well.
        let tool = Tool::new("tool_last", ["file files"; 12].join(" "));
        add(&mut postings, &mut vocabulary, 400_000, &tool);
        let mut more = kept.clone();
        more.push((400_000, 12));
        check(&postings, &more);
    }

    #[test]
    fn a_word_written_as_its_stem_many_times_keeps_one_entry_for_both_forms() {
        let mut vocabulary = Vocabulary::default();
        let mut postings = Postings::default();
        for (slot, count) in [(0u32, 3usize), (70_000, 20)] {
            let tool = Tool::new(format!("tool_{slot}"), vec!["mail"; count].join(" "));
            add(&mut postings, &mut vocabulary, slot, &tool);
        }
        let mail = vocabulary.id("mail").unwrap();
        let (stems, raws) = postings.entries(mail);
        let described: Vec<(u32, u16, bool)> = stems
            .iter()
            .filter(|e| e.field() == Field::Description)
            .map(|e| (e.slot, e.freq, e.also_written()))
            .collect();
        assert_eq!(described, [(0, 3, true), (70_000, 20, true)]);
        assert!(raws.is_empty());
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
        assert!(stems.iter().chain(raws.iter()).all(|e| e.slot == 2));
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
