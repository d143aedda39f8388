//! The live tools by slot, their inverted index, and the BM25F scorer that reads it.
//!
//! Every logical field is indexed twice: stemmed, and as written (lowercased), so that a query word
//! in its exact form scores above a word that only shares its stem. Scores combine the fields the
//! BM25F way: weighted, length-normalised term frequencies are summed across fields before
//! saturation, so a word repeated in the name and the description is not counted twice over.

use super::config::SearchConfig;
use super::field::{Field, FIELD_COUNT};
pub use super::hits::Hits;
use super::hits::{accumulate, HitsPool, PooledHits};
use super::postings::{self, Postings, KEY_COUNT, UNKNOWN_POSITION};
use super::synonyms::Synonyms;
use super::terms::{NameWords, Vocabulary};
use crate::analyzer::{Analyzer, Token};
use crate::error::{Error, Result};
use crate::tool::Tool;
use rustc_hash::{FxHashMap, FxHasher};
use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::hash::Hasher;
use std::sync::Arc;

/// What a scoring term reads: a word in one field, as a stem or as written, and its weight.
#[derive(Debug, Clone)]
pub struct Source<'a> {
    pub field: Field,
    pub raw: bool,
    pub text: &'a str,
    pub weight: f32,
}

/// The live tools, their slot numbers in the index, and the statistics BM25F needs.
pub struct ToolIndex {
    analyzer: Analyzer,
    synonyms: Synonyms,
    postings: Postings,
    slots: Vec<Option<Arc<Tool>>>,
    lengths: Vec<[u16; FIELD_COUNT]>,
    length_sums: [u64; FIELD_COUNT],
    live: usize,
    by_server: HashMap<String, Vec<u32>>,
    by_name: NameIndex,
    vocabulary: Vocabulary,
    /// Each slot's name words, which name coverage reads.
    name_words: NameWords,
    /// Each slot's server as a number (`NO_SERVER` for tools without one), and the numbers given.
    slot_servers: Vec<u32>,
    server_numbers: HashMap<String, u32>,
    /// Accumulators kept for the next search.
    hits: HitsPool,
}

const NO_SERVER: u32 = u32::MAX;

/// Slot numbers stay under this: [`NameIndex`] flags its values with the bit above.
const MAX_SLOTS: u32 = MANY;

/// Slots by tool name, case-insensitive. Keyed by a hash of the lowercased name, not the name:
/// the tools hold their names already, and a second copy of every name with a vector of slots
/// took more memory than tantivy's whole index. Callers compare the names of the slots found, so
/// two names sharing a hash cost a comparison, never a wrong answer.
#[derive(Default)]
struct NameIndex {
    /// A name's one slot, or, with [`MANY`] set, where its slots are in `many`: nearly every
    /// name is on one server only, and a 4-byte value keeps the table at 16 bytes an entry.
    slots: FxHashMap<u64, u32>,
    many: Vec<Vec<u32>>,
    /// Places in `many` no name uses, to reuse.
    free: Vec<u32>,
}

/// See [`NameIndex::slots`]; slots stay under it ([`MAX_SLOTS`]).
const MANY: u32 = 1 << 31;

impl NameIndex {
    fn key(name: &str) -> u64 {
        let mut hasher = FxHasher::default();
        for c in name.chars().flat_map(char::to_lowercase) {
            hasher.write_u32(u32::from(c));
        }
        hasher.finish()
    }

    fn insert(&mut self, name: &str, slot: u32) {
        match self.slots.entry(Self::key(name)) {
            Entry::Vacant(e) => {
                e.insert(slot);
            }
            Entry::Occupied(mut e) => {
                let held = *e.get();
                if held & MANY != 0 {
                    self.many[(held & !MANY) as usize].push(slot);
                } else {
                    let place = match self.free.pop() {
                        Some(place) => {
                            self.many[place as usize] = vec![held, slot];
                            place
                        }
                        None => {
                            self.many.push(vec![held, slot]);
                            (self.many.len() - 1) as u32
                        }
                    };
                    e.insert(MANY | place);
                }
            }
        }
    }

    fn remove(&mut self, name: &str, slot: u32) {
        let Entry::Occupied(mut e) = self.slots.entry(Self::key(name)) else {
            return;
        };
        let held = *e.get();
        if held & MANY == 0 {
            if held == slot {
                e.remove();
            }
            return;
        }
        let place = held & !MANY;
        let all = &mut self.many[place as usize];
        all.retain(|&s| s != slot);
        match all[..] {
            [] => {
                e.remove();
            }
            [one] => {
                e.insert(one);
            }
            _ => return,
        }
        self.many[place as usize] = Vec::new();
        self.free.push(place);
    }

    /// Slots whose name may be `name` (same hash).
    fn get(&self, name: &str) -> &[u32] {
        match self.slots.get(&Self::key(name)) {
            Some(&held) if held & MANY != 0 => &self.many[(held & !MANY) as usize],
            Some(slot) => std::slice::from_ref(slot),
            None => &[],
        }
    }
}

impl std::fmt::Debug for ToolIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolIndex")
            .field("live", &self.live)
            .finish()
    }
}

impl ToolIndex {
    pub fn new() -> Self {
        let analyzer = Analyzer::new();
        Self {
            synonyms: Synonyms::new(&analyzer),
            analyzer,
            postings: Postings::default(),
            slots: Vec::new(),
            lengths: Vec::new(),
            length_sums: [0; FIELD_COUNT],
            live: 0,
            by_server: HashMap::new(),
            by_name: NameIndex::default(),
            vocabulary: Vocabulary::default(),
            name_words: NameWords::default(),
            slot_servers: Vec::new(),
            server_numbers: HashMap::new(),
            hits: HitsPool::default(),
        }
    }

    /// An empty accumulator with a cell for every slot, taken from those earlier searches
    /// left: two slot-long buffers allocated and zeroed for every query were about 4% of a
    /// search's instructions at 5,000 tools, and more of its time in page faults at 100,000.
    pub fn hits(&self) -> PooledHits<'_> {
        self.hits.take(self.slot_count())
    }

    pub fn analyzer(&self) -> &Analyzer {
        &self.analyzer
    }

    pub fn synonyms(&self) -> &Synonyms {
        &self.synonyms
    }

    /// Number of live tools.
    pub fn len(&self) -> usize {
        self.live
    }

    /// One past the highest slot number: the size of a dense per-slot array.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    pub fn tool(&self, slot: u32) -> Option<&Arc<Tool>> {
        self.slots.get(slot as usize)?.as_ref()
    }

    /// How many server numbers have been given (the size of a dense per-server array).
    pub fn server_count(&self) -> usize {
        self.server_numbers.len()
    }

    /// The server number of a slot's tool; `None` for a tool without a server.
    pub fn server_number(&self, slot: u32) -> Option<u32> {
        self.slot_servers
            .get(slot as usize)
            .copied()
            .filter(|&n| n != NO_SERVER)
    }

    /// Slots of the tools named `name` (case-insensitive), on any server.
    pub fn slots_named(&self, name: &str) -> Vec<u32> {
        let wanted = name.to_lowercase();
        self.by_name
            .get(name)
            .iter()
            .copied()
            .filter(|&slot| {
                self.tool(slot)
                    .is_some_and(|t| t.name().to_lowercase() == wanted)
            })
            .collect()
    }

    pub fn live_slots(&self) -> impl Iterator<Item = (u32, &Arc<Tool>)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, t)| Some((i as u32, t.as_ref()?)))
    }

    /// Replaces every tool of `server` with `tools` and commits: the rest of the index is untouched.
    pub fn replace_server(&mut self, server: &str, tools: &[Arc<Tool>]) -> Result<()> {
        self.stage_removal(server);
        for tool in tools {
            self.stage_tool(tool.clone())?;
        }
        self.commit();
        Ok(())
    }

    /// Adds the tools of many servers in one commit (the initial build).
    pub fn rebuild<'a>(&mut self, tools: impl Iterator<Item = &'a Arc<Tool>>) -> Result<()> {
        let servers: Vec<String> = self.by_server.keys().cloned().collect();
        for server in servers {
            self.stage_removal(&server);
        }
        for tool in tools {
            self.stage_tool(tool.clone())?;
        }
        self.commit();
        Ok(())
    }

    pub fn remove_server(&mut self, server: &str) {
        self.stage_removal(server);
        self.commit();
    }

    fn stage_removal(&mut self, server: &str) {
        let Some(slots) = self.by_server.remove(server) else {
            return;
        };
        for slot in slots {
            if let Some(tool) = self.slots[slot as usize].take() {
                self.live -= 1;
                // The tool's words, analysed again, are the numbers they were given when it was
                // added: every word is in the vocabulary already, and numbers are never reused.
                // Only a new word can fail to be numbered, and the tool brings none.
                if let Ok(analyzed) = self.vocabulary.analyze(&self.analyzer, &tool) {
                    let entries = self.vocabulary.remove(&analyzed);
                    self.postings.note_removed(entries);
                }
                self.name_words.note_removed(slot);
                self.by_name.remove(tool.name(), slot);
                for (sum, len) in self.length_sums.iter_mut().zip(self.lengths[slot as usize]) {
                    *sum -= u64::from(len);
                }
            }
        }
    }

    fn stage_tool(&mut self, tool: Arc<Tool>) -> Result<()> {
        let slot = u32::try_from(self.slots.len())
            .ok()
            .filter(|&slot| slot < MAX_SLOTS)
            .ok_or_else(|| {
                Error::Index(format!(
                    "more than {MAX_SLOTS} tools added over the engine's life; build a new engine"
                ))
            })?;
        let analyzed = self.vocabulary.analyze(&self.analyzer, &tool)?;
        self.vocabulary.add(&analyzed);
        self.postings.add(slot, &analyzed);
        self.name_words.push(analyzed.name_words());
        let lengths = analyzed
            .fields
            .each_ref()
            .map(|tokens| u16::try_from(tokens.len()).unwrap_or(u16::MAX));
        for (sum, len) in self.length_sums.iter_mut().zip(lengths) {
            *sum += u64::from(len);
        }
        self.by_server
            .entry(tool.server().to_owned())
            .or_default()
            .push(slot);
        self.by_name.insert(tool.name(), slot);
        let next_number = self.server_numbers.len() as u32;
        let server = if tool.server().is_empty() {
            NO_SERVER
        } else {
            *self
                .server_numbers
                .entry(tool.server().to_owned())
                .or_insert(next_number)
        };
        self.slot_servers.push(server);
        self.slots.push(Some(tool));
        self.lengths.push(lengths);
        self.live += 1;
        Ok(())
    }

    /// Rewrites the postings once removed tools hold enough of them.
    fn commit(&mut self) {
        let slots = &self.slots;
        if self.postings.needs_compaction() {
            self.postings.compact(|slot| is_live(slots, slot));
        }
        self.name_words.compact(|slot| is_live(slots, slot));
    }

    fn alive(&self, slot: u32) -> bool {
        is_live(&self.slots, slot)
    }

    fn average_length(&self, field: Field) -> f32 {
        if self.live == 0 {
            return 1.0;
        }
        (self.length_sums[field as usize] as f32 / self.live as f32).max(1.0)
    }

    /// Scores one query term (all its sources) with BM25F into `out`. Returns the term's idf and
    /// document frequency; `scratch` must be empty and is left empty.
    pub fn score_term(
        &self,
        config: &SearchConfig,
        sources: &[Source<'_>],
        scratch: &mut Hits,
        out: &mut Hits,
        weight: f32,
    ) -> (f32, usize) {
        // The words to read (a query word's stem and its written form), each with the weight of
        // every (field, form) a source asks of it.
        let mut words: Vec<(u32, [Option<f32>; KEY_COUNT])> = Vec::with_capacity(2);
        for source in sources {
            // A field weighed 0 is not searched: its matches would list a tool at score 0, and
            // count it anew when another field scores it.
            if source.weight.is_nan() || source.weight <= 0.0 {
                continue;
            }
            let Some(id) = self.vocabulary.id(source.text) else {
                continue;
            };
            let at = match words.iter().position(|(known, _)| *known == id) {
                Some(at) => at,
                None => {
                    words.push((id, [None; KEY_COUNT]));
                    words.len() - 1
                }
            };
            words[at].1[usize::from(postings::key(source.field, source.raw))] = Some(source.weight);
        }
        let mut sum = Sum {
            index: self,
            scores: &mut scratch.scores,
            order: &mut scratch.order,
            count: scratch.count,
            averages: Field::ALL.map(|f| self.average_length(f)),
            bs: Field::ALL.map(|f| config.field(f).b),
            // Only entries of removed slots need the slot checked (a load per entry that misses
            // the cache in a large catalog), and most of the time there are none.
            check_live: self.postings.holds_removed(),
        };
        for (id, weights) in &words {
            let (stems, raws) = self.postings.entries(*id);
            let wants_raw = weights.iter().skip(1).step_by(2).any(Option::is_some);
            stems.for_each(|entry| {
                let key = entry.form_key();
                if let Some(weight) = weights[key] {
                    sum.add(entry, key, weight);
                }
                if entry.also_written() {
                    if let Some(weight) = weights[key | 1] {
                        sum.add(entry, key | 1, weight);
                    }
                }
            });
            if wants_raw {
                raws.for_each(|entry| {
                    if let Some(weight) = weights[entry.form_key()] {
                        sum.add(entry, entry.form_key(), weight);
                    }
                });
            }
        }
        scratch.count = sum.count;
        let df = scratch.count;
        if df == 0 {
            return (0.0, 0);
        }
        let n = self.live.max(df) as f32;
        let idf = (1.0 + (n - df as f32 + 0.5) / (df as f32 + 0.5)).ln();
        let mut count = out.count;
        for &slot in scratch.touched() {
            let tf = scratch.scores[slot as usize];
            count = accumulate(
                &mut out.scores,
                &mut out.order,
                count,
                slot,
                weight * idf * tf / (config.k1 + tf),
            );
        }
        out.count = count;
        scratch.clear();
        (idf * weight, df)
    }

    /// Slots whose `field` holds `tokens` (stemmed) at consecutive positions, gaps included.
    pub fn phrase_slots(&self, field: Field, tokens: &[Token]) -> Vec<u32> {
        let mut lists = Vec::with_capacity(tokens.len());
        for token in tokens {
            match self.vocabulary.id(&token.stem) {
                Some(id) => lists.push((self.postings.stem_slots(id), 0, token.position)),
                None => return Vec::new(),
            }
        }
        let Some(&(first, _, first_position)) = lists.first() else {
            return Vec::new();
        };
        let mut found = Vec::new();
        'slots: for slot in first.slots() {
            if !self.alive(slot) {
                continue;
            }
            // The positions where the phrase could start, narrowed word by word.
            let mut starts: Option<BTreeSet<i64>> = None;
            for (list, cursor, position) in &mut lists {
                *cursor = list.seek(slot, *cursor);
                let Some(positions) = list.slot(slot, *cursor).positions(field) else {
                    continue 'slots;
                };
                let offset = i64::from(*position - first_position);
                let these = positions
                    .iter()
                    .filter(|&p| p != UNKNOWN_POSITION)
                    .map(|p| i64::from(p) - offset);
                let narrowed: BTreeSet<i64> = match &starts {
                    None => these.collect(),
                    Some(before) => these.filter(|p| before.contains(p)).collect(),
                };
                if narrowed.is_empty() {
                    continue 'slots;
                }
                starts = Some(narrowed);
            }
            found.push(slot);
        }
        found
    }

    /// Slots where one of `fields` holds stem `first` followed by stem `second` within `window`
    /// positions, each once.
    pub fn pair_slots(&self, fields: &[Field], first: &str, second: &str, window: u32) -> Vec<u32> {
        let mut found = Vec::new();
        let (Some(a), Some(b)) = (self.vocabulary.id(first), self.vocabulary.id(second)) else {
            return found;
        };
        let (a, b) = (self.postings.stem_slots(a), self.postings.stem_slots(b));
        // Walk the shorter list and look its slots up in the longer.
        let a_is_short = a.len() <= b.len();
        let (short, long) = if a_is_short { (a, b) } else { (b, a) };
        let check_live = self.postings.holds_removed();
        let wanted = fields
            .iter()
            .fold(0u8, |bits, &field| bits | 1 << field as u8);
        let mut at_long = 0;
        for (slot, at_short) in short.runs() {
            at_long = long.seek(slot, at_long);
            if long.len() <= at_long {
                break;
            }
            if !long.holds(slot, at_long) || (check_live && !self.alive(slot)) {
                continue;
            }
            let (at_a, at_b) = if a_is_short {
                (at_short, at_long)
            } else {
                (at_long, at_short)
            };
            // Most slots holding two common words hold them in different fields, or in fields
            // proximity does not read: the entries say so before any position is looked for.
            if a.fields_at(slot, at_a) & b.fields_at(slot, at_b) & wanted == 0 {
                continue;
            }
            let (in_a, in_b) = (a.slot(slot, at_a), b.slot(slot, at_b));
            // Both slots' fields come in order: one pass pairs them.
            let mut in_b = in_b.fields().peekable();
            let near = in_a.fields().any(|(field, pa)| {
                if wanted & 1 << field as u8 == 0 {
                    return false;
                }
                while in_b.next_if(|&(other, _)| other < field).is_some() {}
                let Some(&(_, pb)) = in_b.peek().filter(|&&(other, _)| other == field) else {
                    return false;
                };
                let known = |p: &u16| *p != UNKNOWN_POSITION;
                pa.iter().filter(known).any(|x| {
                    pb.iter()
                        .filter(known)
                        .any(|y| y > x && u32::from(y - x) <= window)
                })
            });
            if near {
                found.push(slot);
            }
        }
        found
    }

    /// Raw-form terms of `fields` that start with `prefix`, at most `max`, in order.
    pub fn terms_with_prefix(&self, fields: &[Field], prefix: &str, max: usize) -> Vec<String> {
        self.vocabulary.raw_with_prefix(fields, prefix, max)
    }

    /// Every distinct raw-form word of `fields`, once, with the most live tools holding it in
    /// one of them.
    pub fn for_each_term(&self, fields: &[Field], visit: impl FnMut(&str, u32)) {
        self.vocabulary.for_each_raw(fields, visit);
    }

    /// The number the index gives a word, if a tool ever held it.
    pub fn term_id(&self, text: &str) -> Option<u32> {
        self.vocabulary.id(text)
    }

    /// The stems of a live slot's name words, stopwords and bare numbers left out (none for a
    /// removed slot).
    pub fn name_words(&self, slot: u32) -> &[u32] {
        if self.alive(slot) {
            self.name_words.get(slot)
        } else {
            &[]
        }
    }

    /// The fields (bit `1 << field`) where a slot holds word `id` in one of `forms` (`STEM`,
    /// `RAW`).
    pub fn fields_holding(&self, slot: u32, id: u32, forms: u32) -> u8 {
        self.postings.fields_holding(id, slot, forms)
    }
}

/// One query term's BM25F frequencies, summed entry by entry into `scratch`; see
/// [`ToolIndex::score_term`].
struct Sum<'a> {
    index: &'a ToolIndex,
    // The accumulator's parts, held apart so that the walk keeps the count in a register.
    scores: &'a mut [f32],
    order: &'a mut [u32],
    count: usize,
    averages: [f32; FIELD_COUNT],
    bs: [f32; FIELD_COUNT],
    check_live: bool,
}

impl Sum<'_> {
    // Called for every entry a query word reads: inlined into the lists' walk.
    #[inline(always)]
    fn add(&mut self, entry: postings::Entry, key: usize, weight: f32) {
        let f = key >> 1;
        let length = if entry.short_length == postings::LONG_FIELD {
            self.index.lengths[entry.slot as usize][f]
        } else {
            u16::from(entry.short_length)
        };
        let norm = norm(self.bs[f], f32::from(length), self.averages[f]);
        if !self.check_live || self.index.alive(entry.slot) {
            self.count = accumulate(
                self.scores,
                self.order,
                self.count,
                entry.slot,
                weight * f32::from(entry.freq) / norm,
            );
        }
    }
}

/// Whether `slot` holds a tool (a removed tool's slot is empty).
fn is_live(slots: &[Option<Arc<Tool>>], slot: u32) -> bool {
    slots.get(slot as usize).is_some_and(Option::is_some)
}

/// BM25's length normalisation of a field of `length` words where the average is `average`.
fn norm(b: f32, length: f32, average: f32) -> f32 {
    1.0 - b + b * length / average
}

#[cfg(test)]
mod name_index_tests {
    use super::*;

    #[test]
    fn names_are_found_case_insensitively_on_every_server_and_removed_one_by_one() {
        let mut names = NameIndex::default();
        names.insert("Send_Mail", 1);
        names.insert("send_mail", 7);
        names.insert("read_mail", 3);
        assert_eq!(names.get("SEND_MAIL"), &[1, 7]);
        names.remove("send_mail", 1);
        assert_eq!(names.get("send_mail"), &[7]);
        names.remove("Send_Mail", 7);
        assert!(names.get("send_mail").is_empty());
        assert_eq!(names.get("read_mail"), &[3]);
        // A slot the name does not have is no change.
        names.remove("read_mail", 4);
        assert_eq!(names.get("read_mail"), &[3]);
        // Names on several servers again: the room the first such name left is reused.
        for slot in [9, 10, 11] {
            names.insert("send_mail", slot);
        }
        names.insert("READ_MAIL", 12);
        assert_eq!(names.many.len(), 2);
        names.remove("send_mail", 10);
        assert_eq!(names.get("send_mail"), &[9, 11]);
        assert_eq!(names.get("read_mail"), &[3, 12]);
        names.remove("read_mail", 3);
        names.remove("send_mail", 9);
        names.remove("send_mail", 11);
        assert!(names.get("send_mail").is_empty());
        assert_eq!(names.get("read_mail"), &[12]);
        names.insert("list_mail", 13);
        names.insert("list_mail", 14);
        assert_eq!(names.get("list_mail"), &[13, 14]);
        assert_eq!(names.many.len(), 2);
    }

    #[test]
    fn slots_named_checks_the_names_it_finds() {
        let mut index = ToolIndex::new();
        let tools: Vec<Arc<Tool>> = ["Get_Weather", "get_forecast"]
            .into_iter()
            .map(|name| Arc::new(Tool::new(name, "weather").with_server("w")))
            .collect();
        index.replace_server("w", &tools).unwrap();
        assert_eq!(index.slots_named("get_weather"), vec![0]);
        assert!(index.slots_named("get_weathe").is_empty());
        index.replace_server("w", &tools[1..]).unwrap();
        assert!(index.slots_named("get_weather").is_empty());
        assert_eq!(index.slots_named("GET_FORECAST"), vec![2]);
    }
}

#[cfg(test)]
mod changes_tests {
    use super::*;
    use crate::analyzer::Analyzer;

    fn tools(server: &str, version: usize) -> Vec<Arc<Tool>> {
        (0..6)
            .map(|i| {
                let name = format!("{server}_tool_{i}_v{version}");
                let description = match (i + version) % 3 {
                    0 => "Sends mail to a contact, with files attached",
                    1 => "Reads the files of a folder and lists files by date",
                    _ => "Looks the weather up for a city: mail me the forecast",
                };
                Arc::new(Tool::new(name, description).with_server(server))
            })
            .collect()
    }

    /// Every query word's BM25F score, proximity and phrase matches, by tool name.
    fn answers(index: &ToolIndex) -> Vec<(String, Vec<(String, u32)>)> {
        let config = SearchConfig::default();
        let name = |slot: u32| {
            index
                .tool(slot)
                .map_or(String::new(), |t| t.name().to_owned())
        };
        let mut out = Vec::new();
        for word in [
            "mail", "files", "file", "weather", "forecast", "contact", "list",
        ] {
            let sources: Vec<Source> = Field::ALL
                .iter()
                .flat_map(|&field| {
                    [false, true].map(|raw| Source {
                        field,
                        raw,
                        text: word,
                        weight: config.field(field).weight,
                    })
                })
                .collect();
            let mut scratch = Hits::new(index.slot_count());
            let mut hits = Hits::new(index.slot_count());
            let (idf, df) = index.score_term(&config, &sources, &mut scratch, &mut hits, 1.0);
            let mut scores: Vec<(String, u32)> = hits
                .touched()
                .iter()
                .map(|&slot| (name(slot), hits.scores[slot as usize].to_bits()))
                .collect();
            scores.push((format!("idf {df}"), idf.to_bits()));
            scores.sort();
            out.push((word.to_string(), scores));
        }
        let analyzer = Analyzer::new();
        for (a, b) in [("send", "mail"), ("file", "folder"), ("look", "weather")] {
            let mut near: Vec<(String, u32)> = index
                .pair_slots(&Field::ALL, a, b, 3)
                .into_iter()
                .map(|slot| (name(slot), 0))
                .collect();
            near.sort();
            out.push((format!("{a} near {b}"), near));
        }
        for phrase in ["files attached", "lists files", "city mail"] {
            let tokens = analyzer.tokens(phrase);
            let mut found: Vec<(String, u32)> = index
                .phrase_slots(Field::Description, &tokens)
                .into_iter()
                .map(|slot| (name(slot), 0))
                .collect();
            found.sort();
            out.push((phrase.to_string(), found));
        }
        out
    }

    #[test]
    fn a_changed_index_scores_as_one_built_afresh() {
        let servers = ["alpha", "beta", "gamma", "delta"];
        let mut changed = ToolIndex::new();
        let all: Vec<Arc<Tool>> = servers.iter().flat_map(|s| tools(s, 0)).collect();
        changed.rebuild(all.iter()).unwrap();
        // Replacements leave removed entries in the lists until they pile up and the lists are
        // rewritten: both states must answer as an index built afresh.
        let mut latest = [Some(0); 4];
        for round in 1..=10 {
            let at = round % servers.len();
            if round == 10 {
                latest[at] = None;
                changed.remove_server(servers[at]);
            } else {
                latest[at] = Some(round);
                changed
                    .replace_server(servers[at], &tools(servers[at], round))
                    .unwrap();
            }
            let now: Vec<Arc<Tool>> = servers
                .iter()
                .zip(latest)
                .filter_map(|(s, version)| Some(tools(s, version?)))
                .flatten()
                .collect();
            let mut fresh = ToolIndex::new();
            fresh.rebuild(now.iter()).unwrap();
            let expected = answers(&fresh);
            let empty: Vec<&String> = expected
                .iter()
                .filter(|(_, found)| found.is_empty())
                .map(|(what, _)| what)
                .collect();
            assert!(empty.is_empty(), "{empty:?}");
            assert_eq!(answers(&changed), expected, "after round {round}");
        }
        assert!(changed.slot_count() > 3 * 6, "slots were retired");
    }

    #[test]
    fn a_field_of_any_length_is_normalised_by_its_own_length() {
        // Lengths on both sides of what an entry keeps beside it (under 255 words).
        let lengths = [3, 254, 255, 256, 300, 700];
        let tools: Vec<Arc<Tool>> = lengths
            .iter()
            .map(|&length| {
                let description = format!("alpha{}", " zeta".repeat(length - 1));
                Arc::new(Tool::new(format!("tool_{length}"), description).with_server("s"))
            })
            .collect();
        let mut index = ToolIndex::new();
        index.rebuild(tools.iter()).unwrap();
        let config = SearchConfig::default();
        let weight = config.field(Field::Description).weight;
        let sources = [Source {
            field: Field::Description,
            raw: false,
            text: "alpha",
            weight,
        }];
        let mut scratch = Hits::new(index.slot_count());
        let mut hits = Hits::new(index.slot_count());
        let (idf, df) = index.score_term(&config, &sources, &mut scratch, &mut hits, 1.0);
        assert_eq!(df, lengths.len());
        let average = index.average_length(Field::Description);
        let b = config.field(Field::Description).b;
        for (slot, &length) in lengths.iter().enumerate() {
            let tf = weight / norm(b, length as f32, average);
            let expected = idf * tf / (config.k1 + tf);
            assert_eq!(hits.scores[slot], expected, "{length} words");
        }
    }

    #[test]
    fn a_field_weighed_zero_neither_lists_a_tool_nor_counts_it_twice() {
        // "alpha" in the name (weighed 0) of every tool, and in the description of one.
        let tools: Vec<Arc<Tool>> = (0..4)
            .map(|i| {
                let description = if i == 2 { "alpha here" } else { "nothing" };
                Arc::new(Tool::new(format!("alpha_{i}"), description).with_server("s"))
            })
            .collect();
        let mut index = ToolIndex::new();
        index.rebuild(tools.iter()).unwrap();
        let config = SearchConfig::default();
        let source = |field: Field, weight: f32| Source {
            field,
            raw: false,
            text: "alpha",
            weight,
        };
        let score = |sources: &[Source]| {
            let mut scratch = index.hits();
            let mut hits = index.hits();
            let (idf, df) = index.score_term(&config, sources, &mut scratch, &mut hits, 1.0);
            let scores: Vec<(u32, u32)> = hits
                .touched()
                .iter()
                .map(|&slot| (slot, hits.scores[slot as usize].to_bits()))
                .collect();
            (idf.to_bits(), df, scores)
        };
        let description = config.field(Field::Description).weight;
        let with_zero = score(&[
            source(Field::Name, 0.0),
            source(Field::Description, description),
        ]);
        let without = score(&[source(Field::Description, description)]);
        assert_eq!(with_zero, without);
        assert_eq!(without.2.len(), 1);
    }

    #[test]
    fn an_accumulator_comes_back_from_the_pool_empty_and_sized_for_the_index() {
        let mut index = ToolIndex::new();
        let tools = tools("s", 0);
        index.rebuild(tools.iter()).unwrap();
        {
            let mut hits = index.hits();
            for slot in 0..index.slot_count() as u32 {
                hits.add(slot, 1.5);
                hits.add(slot, 1.0);
            }
            assert_eq!(hits.touched().len(), index.slot_count());
        }
        let grown: Vec<Arc<Tool>> = tools.iter().cloned().chain(self::tools("t", 1)).collect();
        index.rebuild(grown.iter()).unwrap();
        let mut hits = index.hits();
        assert!(hits.touched().is_empty());
        assert!(hits.scores.iter().all(|&s| s == 0.0));
        assert!(hits.scores.len() >= index.slot_count());
        let last = index.slot_count() as u32 - 1;
        hits.add(last, 2.0);
        assert_eq!(hits.touched(), [last]);
    }

    #[test]
    fn pairs_are_found_between_lists_of_any_lengths() {
        // "common" in every tool, "rare" in every 20th, "half" in every other; each next to
        // "common" in every third tool that has it.
        let description = |i: usize, word: &str| {
            if i.is_multiple_of(3) {
                format!("the common {word} thing")
            } else {
                format!("the common one, far from {word}")
            }
        };
        let tools: Vec<Arc<Tool>> = (0..600)
            .map(|i| {
                let text = match (i % 20, i % 2) {
                    (0, _) => description(i, "rare half"),
                    (_, 0) => description(i, "half"),
                    _ => "the common word alone".to_string(),
                };
                Arc::new(Tool::new(format!("tool_{i}"), text).with_server("s"))
            })
            .collect();
        let mut index = ToolIndex::new();
        index.rebuild(tools.iter()).unwrap();
        let fields = [Field::Description];
        let expected = |every: usize| -> Vec<u32> {
            (0..600u32)
                .filter(|&i| (i as usize).is_multiple_of(every) && i.is_multiple_of(3))
                .collect()
        };
        assert_eq!(index.pair_slots(&fields, "common", "rare", 3), expected(20));
        assert_eq!(
            index.pair_slots(&fields, "rare", "common", 3),
            Vec::<u32>::new()
        );
        assert_eq!(index.pair_slots(&fields, "common", "half", 3), expected(2));
        assert_eq!(
            index.pair_slots(&fields, "half", "common", 3),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn pairs_are_found_in_the_fields_asked_for_and_only_where_both_words_are() {
        let tools: Vec<Arc<Tool>> = [
            // Together in the name only.
            ("send_mail", "mail is what this will send"),
            // "send" in the name and the description, "mail" in the description only, next to
            // it there.
            ("send_report", "a report by mail: send mail"),
            // Each in a field the other is not in.
            ("send_it", "mail"),
            // "mail" in the name and the description, "send" next to it in the description.
            ("mail_report", "send mail"),
        ]
        .iter()
        .map(|&(name, description)| Arc::new(Tool::new(name, description).with_server("s")))
        .collect();
        let mut index = ToolIndex::new();
        index.rebuild(tools.iter()).unwrap();
        let pairs = |fields: &[Field]| index.pair_slots(fields, "send", "mail", 1);
        assert_eq!(pairs(&[Field::Name]), [0]);
        assert_eq!(pairs(&[Field::Description]), [1, 3]);
        assert_eq!(pairs(&[Field::Name, Field::Description]), [0, 1, 3]);
        assert_eq!(pairs(&Field::ALL), [0, 1, 3]);
        assert!(pairs(&[Field::Server, Field::ParamNames]).is_empty());
    }

    #[test]
    fn phrases_and_proximity_read_a_field_up_to_its_65535th_word() {
        // "send mail" at the start of the description; "fetch" the last word whose position is
        // kept (65,534), "page" thousands of words later, where positions are not kept: read as
        // the last kept position, they would make a phrase and a pair.
        let description = format!(
            "send mail{} fetch{} page",
            " zeta".repeat(65_532),
            " zeta".repeat(5_000)
        );
        let tool = Arc::new(Tool::new("long", description).with_server("s"));
        let mut index = ToolIndex::new();
        index.rebuild([tool].iter()).unwrap();
        let analyzer = Analyzer::new();
        let phrase = |text: &str| index.phrase_slots(Field::Description, &analyzer.tokens(text));
        assert_eq!(phrase("send mail"), [0]);
        assert_eq!(phrase("zeta fetch"), [0]);
        assert!(phrase("fetch page").is_empty());
        let fields = [Field::Description];
        assert_eq!(index.pair_slots(&fields, "send", "mail", 1), [0]);
        assert_eq!(index.pair_slots(&fields, "zeta", "fetch", 1), [0]);
        assert!(index.pair_slots(&fields, "fetch", "page", 3).is_empty());
    }
}
