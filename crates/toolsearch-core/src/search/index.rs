//! The tantivy index in RAM and the BM25F scorer that reads its postings.
//!
//! Every logical field is indexed twice: stemmed, and as written (lowercased), so that a query word
//! in its exact form scores above a word that only shares its stem. Scores combine the fields the
//! BM25F way: weighted, length-normalised term frequencies are summed across fields before
//! saturation, so a word repeated in the name and the description is not counted twice over.

use super::config::SearchConfig;
use super::field::{Field, FIELD_COUNT};
use super::synonyms::Synonyms;
use super::terms::{SlotTerms, Vocabulary, WordToken};
use crate::analyzer::{Analyzer, Token};
use crate::error::{Error, Result};
use crate::tool::Tool;
use rustc_hash::{FxHashMap, FxHasher};
use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::hash::Hasher;
use std::sync::Arc;
use tantivy::indexer::NoMergePolicy;
use tantivy::postings::{BlockSegmentPostings, Postings};
use tantivy::schema::{
    Field as TantivyField, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing,
    TextOptions, STRING,
};
use tantivy::tokenizer::{Token as TantivyToken, TokenStream, Tokenizer};
use tantivy::{
    DocSet, Index, IndexReader, IndexWriter, InvertedIndexReader, ReloadPolicy, Searcher,
    TantivyDocument, Term, TERMINATED,
};

/// One posting list to read for a scoring term: a field in stemmed or raw form, a term, a weight.
#[derive(Debug, Clone)]
pub struct Source<'a> {
    pub field: Field,
    pub raw: bool,
    pub text: &'a str,
    pub weight: f32,
}

/// Dense per-slot accumulator with the list of slots it touched.
#[derive(Debug, Clone)]
pub struct Hits {
    pub scores: Vec<f32>,
    pub touched: Vec<u32>,
}

impl Hits {
    pub fn new(slots: usize) -> Self {
        Self {
            scores: vec![0.0; slots],
            touched: Vec::new(),
        }
    }

    pub fn add(&mut self, slot: u32, score: f32) {
        let cell = &mut self.scores[slot as usize];
        if *cell == 0.0 {
            self.touched.push(slot);
        }
        *cell += score;
    }

    pub fn contains(&self, slot: u32) -> bool {
        self.scores[slot as usize] > 0.0
    }

    pub fn merge_from(&mut self, other: &Hits) {
        for &slot in &other.touched {
            self.add(slot, other.scores[slot as usize]);
        }
    }

    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        let scores = &mut self.scores;
        self.touched.retain(|&slot| {
            let ok = keep(slot);
            if !ok {
                scores[slot as usize] = 0.0;
            }
            ok
        });
    }

    pub fn clear(&mut self) {
        for &slot in &self.touched {
            self.scores[slot as usize] = 0.0;
        }
        self.touched.clear();
    }
}

struct SchemaFields {
    stemmed: [TantivyField; FIELD_COUNT],
    raw: [TantivyField; FIELD_COUNT],
    slot: TantivyField,
    server_key: TantivyField,
}

struct SegmentView {
    /// Document → slot, read once from the fast field when the snapshot is taken.
    slots: Vec<u32>,
    stemmed: Vec<Arc<InvertedIndexReader>>,
    raw: Vec<Arc<InvertedIndexReader>>,
    alive: Option<tantivy::fastfield::AliveBitSet>,
}

/// A point-in-time view of the index, rebuilt after every commit.
struct Snapshot {
    _searcher: Searcher,
    segments: Vec<SegmentView>,
}

/// The live tools, their slot numbers in the index, and the statistics BM25F needs.
pub struct ToolIndex {
    analyzer: Analyzer,
    synonyms: Synonyms,
    fields: SchemaFields,
    index: Index,
    /// Opened by the first change. (Closing it after each commit frees nothing: its arenas stay
    /// with the allocator, and a new writer's thread allocates afresh, which raised the peak.)
    writer: Option<IndexWriter>,
    reader: IndexReader,
    snapshot: Snapshot,
    slots: Vec<Option<Arc<Tool>>>,
    lengths: Vec<[u16; FIELD_COUNT]>,
    length_sums: [u64; FIELD_COUNT],
    live: usize,
    by_server: HashMap<String, Vec<u32>>,
    by_name: NameIndex,
    vocabulary: Vocabulary,
    /// Each slot's words by field (empty for a removed slot).
    slot_terms: Vec<SlotTerms>,
    /// Each slot's server as a number (`NO_SERVER` for tools without one), and the numbers given.
    slot_servers: Vec<u32>,
    server_numbers: HashMap<String, u32>,
}

const NO_SERVER: u32 = u32::MAX;

/// The indexing thread's memory budget. The writer flushes a segment when its arenas reach it;
/// 100,000 tools fit well within it.
const WRITER_BUDGET: usize = 50_000_000;

/// Slots by tool name, case-insensitive. Keyed by a hash of the lowercased name, not the name:
/// the tools hold their names already, and a second copy of every name with a vector of slots
/// took more memory than tantivy's whole index. Callers compare the names of the slots found, so
/// two names sharing a hash cost a comparison, never a wrong answer.
#[derive(Default)]
struct NameIndex {
    slots: FxHashMap<u64, NameSlots>,
}

/// Nearly every name is on one server only; only names on several need a vector.
enum NameSlots {
    One(u32),
    Many(Vec<u32>),
}

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
                e.insert(NameSlots::One(slot));
            }
            Entry::Occupied(mut e) => match e.get_mut() {
                NameSlots::One(first) => {
                    let first = *first;
                    e.insert(NameSlots::Many(vec![first, slot]));
                }
                NameSlots::Many(all) => all.push(slot),
            },
        }
    }

    fn remove(&mut self, name: &str, slot: u32) {
        let key = Self::key(name);
        let now_empty = match self.slots.get_mut(&key) {
            Some(NameSlots::One(only)) => *only == slot,
            Some(NameSlots::Many(all)) => {
                all.retain(|&s| s != slot);
                all.is_empty()
            }
            None => false,
        };
        if now_empty {
            self.slots.remove(&key);
        }
    }

    /// Slots whose name may be `name` (same hash).
    fn get(&self, name: &str) -> &[u32] {
        match self.slots.get(&Self::key(name)) {
            Some(NameSlots::One(slot)) => std::slice::from_ref(slot),
            Some(NameSlots::Many(all)) => all,
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
    pub fn new() -> Result<Self> {
        let mut builder = Schema::builder();
        let text = |record| {
            TextOptions::default().set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer(SPACED_TOKENIZER)
                    .set_index_option(record),
            )
        };
        // Phrases and proximity read positions of stems only; the raw forms only need counts.
        let stemmed = Field::ALL.map(|f| {
            builder.add_text_field(f.as_str(), text(IndexRecordOption::WithFreqsAndPositions))
        });
        let raw = Field::ALL.map(|f| {
            builder.add_text_field(
                &format!("{}_raw", f.as_str()),
                text(IndexRecordOption::WithFreqs),
            )
        });
        let slot = builder.add_u64_field("slot", NumericOptions::default().set_fast());
        let server_key = builder.add_text_field("server_key", STRING);
        let index = Index::create_in_ram(builder.build());
        index
            .tokenizers()
            .register(SPACED_TOKENIZER, SpacedTokenizer::default());
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        let fields = SchemaFields {
            stemmed,
            raw,
            slot,
            server_key,
        };
        let snapshot = Snapshot::new(&reader, &fields)?;
        let analyzer = Analyzer::new();
        Ok(Self {
            synonyms: Synonyms::new(&analyzer),
            analyzer,
            fields,
            index,
            writer: None,
            reader,
            snapshot,
            slots: Vec::new(),
            lengths: Vec::new(),
            length_sums: [0; FIELD_COUNT],
            live: 0,
            by_server: HashMap::new(),
            by_name: NameIndex::default(),
            vocabulary: Vocabulary::default(),
            slot_terms: Vec::new(),
            slot_servers: Vec::new(),
            server_numbers: HashMap::new(),
        })
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
                    .is_some_and(|t| t.name.to_lowercase() == wanted)
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
        self.stage_removal(server)?;
        for tool in tools {
            self.stage_tool(tool.clone())?;
        }
        self.commit()
    }

    /// Adds the tools of many servers in one commit (the initial build).
    pub fn rebuild<'a>(&mut self, tools: impl Iterator<Item = &'a Arc<Tool>>) -> Result<()> {
        let servers: Vec<String> = self.by_server.keys().cloned().collect();
        for server in servers {
            self.stage_removal(&server)?;
        }
        for tool in tools {
            self.stage_tool(tool.clone())?;
        }
        self.commit()
    }

    pub fn remove_server(&mut self, server: &str) -> Result<()> {
        self.stage_removal(server)?;
        self.commit()
    }

    fn writer(&mut self) -> Result<&mut IndexWriter> {
        match &mut self.writer {
            Some(writer) => Ok(writer),
            empty => {
                let writer: IndexWriter = self.index.writer_with_num_threads(1, WRITER_BUDGET)?;
                // Segments are merged on our own schedule (see `maybe_merge`), never in the
                // background.
                writer.set_merge_policy(Box::new(NoMergePolicy));
                Ok(empty.insert(writer))
            }
        }
    }

    fn stage_removal(&mut self, server: &str) -> Result<()> {
        if !self.by_server.contains_key(server) {
            return Ok(());
        }
        let term = Term::from_field_text(self.fields.server_key, server);
        self.writer()?.delete_term(term);
        let slots = self.by_server.remove(server).unwrap_or_default();
        for slot in slots {
            if let Some(tool) = self.slots[slot as usize].take() {
                self.live -= 1;
                let terms = std::mem::take(&mut self.slot_terms[slot as usize]);
                self.vocabulary.remove(&terms);
                self.by_name.remove(&tool.name, slot);
                for (sum, len) in self.length_sums.iter_mut().zip(self.lengths[slot as usize]) {
                    *sum -= u64::from(len);
                }
            }
        }
        Ok(())
    }

    fn stage_tool(&mut self, tool: Arc<Tool>) -> Result<()> {
        let slot = u32::try_from(self.slots.len())
            .map_err(|_| Error::Index("more than 4 billion tool slots".into()))?;
        let analyzed = self.vocabulary.analyze(&self.analyzer, &tool)?;
        let terms = self.vocabulary.add(&analyzed);
        let mut doc = TantivyDocument::new();
        let mut lengths = [0u16; FIELD_COUNT];
        for field in Field::ALL {
            let tokens = &analyzed.fields[field as usize];
            lengths[field as usize] = u16::try_from(tokens.len()).unwrap_or(u16::MAX);
            if tokens.is_empty() {
                continue;
            }
            let words = &self.vocabulary;
            doc.add_text(
                self.fields.stemmed[field as usize],
                spaced_text(tokens, |t| words.word(t.stem)),
            );
            doc.add_text(
                self.fields.raw[field as usize],
                spaced_text(tokens, |t| words.word(t.raw)),
            );
        }
        doc.add_u64(self.fields.slot, u64::from(slot));
        doc.add_text(self.fields.server_key, &tool.server);
        self.writer()?.add_document(doc)?;
        for (sum, len) in self.length_sums.iter_mut().zip(lengths) {
            *sum += u64::from(len);
        }
        self.by_server
            .entry(tool.server.clone())
            .or_default()
            .push(slot);
        self.by_name.insert(&tool.name, slot);
        let next_number = self.server_numbers.len() as u32;
        let server = if tool.server.is_empty() {
            NO_SERVER
        } else {
            *self
                .server_numbers
                .entry(tool.server.clone())
                .or_insert(next_number)
        };
        self.slot_servers.push(server);
        self.slots.push(Some(tool));
        self.slot_terms.push(terms);
        self.lengths.push(lengths);
        self.live += 1;
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        let Some(writer) = self.writer.as_mut() else {
            return Ok(());
        };
        writer.commit()?;
        Self::maybe_merge(writer)?;
        self.reader.reload()?;
        self.snapshot = Snapshot::new(&self.reader, &self.fields)?;
        Ok(())
    }

    /// Many small segments slow every query down; fold them into one when they pile up.
    fn maybe_merge(writer: &mut IndexWriter) -> Result<()> {
        let segments = writer.index().searchable_segment_ids()?;
        if segments.len() > 8 {
            let merge = writer.merge(&segments);
            merge.wait()?;
        }
        Ok(())
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
    ) -> Result<(f32, usize)> {
        let averages = Field::ALL.map(|f| self.average_length(f));
        let mut readers: [Option<BlockSegmentPostings>; 2] = [None, None];
        for segment in &self.snapshot.segments {
            for source in sources {
                if !self
                    .vocabulary
                    .contains(source.text, source.field, source.raw)
                {
                    continue;
                }
                let f = source.field as usize;
                let (inverted, tantivy_field) = if source.raw {
                    (&segment.raw[f], self.fields.raw[f])
                } else {
                    (&segment.stemmed[f], self.fields.stemmed[f])
                };
                let term = Term::from_field_text(tantivy_field, source.text);
                let Some(info) = inverted.get_term_info(&term)? else {
                    continue;
                };
                // Whole blocks of (document, frequency) at a time: cheaper to walk than a
                // document-at-a-time cursor, and scoring needs nothing else. One reader per
                // record option (positions change the skip data) is reset from term to term
                // rather than opened anew.
                let block =
                    match &mut readers[usize::from(source.raw)] {
                        Some(block) => {
                            inverted.reset_block_postings_from_terminfo(&info, block)?;
                            block
                        }
                        empty => empty.insert(inverted.read_block_postings_from_terminfo(
                            &info,
                            IndexRecordOption::WithFreqs,
                        )?),
                    };
                let b = config.field(source.field).b;
                let average = averages[f];
                while !block.docs().is_empty() {
                    for (&doc, &freq) in block.docs().iter().zip(block.freqs()) {
                        if segment.alive.as_ref().is_some_and(|a| !a.is_alive(doc)) {
                            continue;
                        }
                        if let Some(&slot) = segment.slots.get(doc as usize) {
                            let len = f32::from(self.lengths[slot as usize][f]);
                            let norm = 1.0 - b + b * len / average;
                            scratch.add(slot, source.weight * freq as f32 / norm);
                        }
                    }
                    block.advance();
                }
            }
        }
        let df = scratch.touched.len();
        if df == 0 {
            return Ok((0.0, 0));
        }
        let n = self.live.max(df) as f32;
        let idf = (1.0 + (n - df as f32 + 0.5) / (df as f32 + 0.5)).ln();
        for &slot in &scratch.touched {
            let tf = scratch.scores[slot as usize];
            out.add(slot, weight * idf * tf / (config.k1 + tf));
        }
        scratch.clear();
        Ok((idf * weight, df))
    }

    /// Slots whose `field` holds `tokens` (stemmed) at consecutive positions, gaps included.
    pub fn phrase_slots(&self, field: Field, tokens: &[Token]) -> Result<Vec<u32>> {
        let mut found = Vec::new();
        let Some(first) = tokens.first() else {
            return Ok(found);
        };
        let f = field as usize;
        let mut positions = Vec::new();
        for segment in &self.snapshot.segments {
            let mut lists = Vec::with_capacity(tokens.len());
            for token in tokens {
                let term = Term::from_field_text(self.fields.stemmed[f], &token.stem);
                match segment.stemmed[f]
                    .read_postings(&term, IndexRecordOption::WithFreqsAndPositions)?
                {
                    Some(p) => lists.push(p),
                    None => {
                        lists.clear();
                        break;
                    }
                }
            }
            if lists.is_empty() {
                continue;
            }
            // Leapfrog intersection of the posting lists, then a position check.
            let mut doc = lists[0].doc();
            'docs: while doc != TERMINATED {
                for list in lists.iter_mut() {
                    let d = seek_forward(list, doc);
                    if d != doc {
                        doc = seek_forward(&mut lists[0], d);
                        continue 'docs;
                    }
                }
                let mut starts: Option<BTreeSet<i64>> = None;
                for (token, list) in tokens.iter().zip(lists.iter_mut()) {
                    list.positions(&mut positions);
                    let offset = i64::from(token.position - first.position);
                    let these: BTreeSet<i64> =
                        positions.iter().map(|&p| i64::from(p) - offset).collect();
                    starts = Some(match starts {
                        None => these,
                        Some(prev) => prev.intersection(&these).copied().collect(),
                    });
                }
                let alive = segment.alive.as_ref().is_none_or(|a| a.is_alive(doc));
                if alive && starts.is_some_and(|s| !s.is_empty()) {
                    if let Some(&slot) = segment.slots.get(doc as usize) {
                        found.push(slot);
                    }
                }
                doc = lists[0].advance();
            }
        }
        Ok(found)
    }

    /// Slots whose `field` holds stem `first` followed by stem `second` within `window` positions.
    pub fn pair_slots(
        &self,
        field: Field,
        first: &str,
        second: &str,
        window: u32,
    ) -> Result<Vec<u32>> {
        let f = field as usize;
        let mut found = Vec::new();
        if !self.vocabulary.contains(first, field, false)
            || !self.vocabulary.contains(second, field, false)
        {
            return Ok(found);
        }
        let (mut pa, mut pb) = (Vec::new(), Vec::new());
        for segment in &self.snapshot.segments {
            let read = |stem: &str| {
                let term = Term::from_field_text(self.fields.stemmed[f], stem);
                segment.stemmed[f].read_postings(&term, IndexRecordOption::WithFreqsAndPositions)
            };
            let (Some(mut a), Some(mut b)) = (read(first)?, read(second)?) else {
                continue;
            };
            let mut doc = a.doc();
            while doc != TERMINATED {
                let other = seek_forward(&mut b, doc);
                if other == TERMINATED {
                    break;
                }
                if other != doc {
                    doc = seek_forward(&mut a, other);
                    continue;
                }
                a.positions(&mut pa);
                b.positions(&mut pb);
                let near = pa
                    .iter()
                    .any(|&x| pb.iter().any(|&y| y > x && y - x <= window));
                if near && segment.alive.as_ref().is_none_or(|al| al.is_alive(doc)) {
                    if let Some(&slot) = segment.slots.get(doc as usize) {
                        found.push(slot);
                    }
                }
                doc = a.advance();
            }
        }
        Ok(found)
    }

    /// Raw-form terms of `fields` that start with `prefix`, at most `max`, in order.
    pub fn terms_with_prefix(
        &self,
        fields: &[Field],
        prefix: &str,
        max: usize,
    ) -> Result<Vec<String>> {
        let mut out = BTreeSet::new();
        for segment in &self.snapshot.segments {
            for &field in fields {
                let dict = segment.raw[field as usize].terms();
                let mut stream = dict.range().ge(prefix.as_bytes()).into_stream()?;
                while stream.advance() {
                    let Ok(term) = std::str::from_utf8(stream.key()) else {
                        continue;
                    };
                    if !term.starts_with(prefix) {
                        break;
                    }
                    out.insert(term.to_string());
                    if out.len() >= max * 4 {
                        break;
                    }
                }
            }
        }
        Ok(out.into_iter().take(max).collect())
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

    /// A slot's words by field (empty for a removed slot).
    pub fn slot_terms(&self, slot: u32) -> Option<&SlotTerms> {
        self.slot_terms.get(slot as usize)
    }
}

impl Snapshot {
    fn new(reader: &IndexReader, fields: &SchemaFields) -> Result<Self> {
        let searcher = reader.searcher();
        let mut segments = Vec::new();
        for segment in searcher.segment_readers() {
            let stemmed = fields
                .stemmed
                .iter()
                .map(|&f| segment.inverted_index(f))
                .collect::<tantivy::Result<Vec<_>>>()?;
            let raw = fields
                .raw
                .iter()
                .map(|&f| segment.inverted_index(f))
                .collect::<tantivy::Result<Vec<_>>>()?;
            segments.push(SegmentView {
                slots: doc_slots(segment)?,
                stemmed,
                raw,
                alive: segment.alive_bitset().cloned(),
            });
        }
        Ok(Self {
            _searcher: searcher,
            segments,
        })
    }
}

fn doc_slots(segment: &tantivy::SegmentReader) -> Result<Vec<u32>> {
    let column = segment.fast_fields().u64("slot")?;
    (0..segment.max_doc())
        .map(|doc| {
            let slot = column
                .first(doc)
                .ok_or_else(|| Error::Index(format!("document {doc} has no slot number")))?;
            u32::try_from(slot).map_err(|_| Error::Index(format!("slot {slot} out of range")))
        })
        .collect()
}

/// `DocSet::seek` requires a target at or past the current document; a list that is already
/// further along simply stays where it is.
fn seek_forward<D: DocSet>(docs: &mut D, target: tantivy::DocId) -> tantivy::DocId {
    if docs.doc() >= target {
        docs.doc()
    } else {
        docs.seek(target)
    }
}

/// A field's tokens in one form, as the text handed to tantivy: the tokens joined by spaces, with
/// an empty piece for every position skipped (stopwords, the gap between two values), so that
/// [`SpacedTokenizer`] reads back the same tokens at the same positions. Tokens never hold a
/// space: analysis splits on everything but letters and digits.
fn spaced_text<'w>(tokens: &[WordToken], form: impl Fn(&WordToken) -> &'w str) -> String {
    let mut out = String::new();
    let mut pieces = 0u32;
    for token in tokens {
        while pieces <= token.position {
            if pieces > 0 {
                out.push(' ');
            }
            if pieces == token.position {
                out.push_str(form(token));
            }
            pieces += 1;
        }
    }
    out
}

/// The name the index's schema gives [`SpacedTokenizer`].
const SPACED_TOKENIZER: &str = "toolsearch_spaced";

/// Reads back [`spaced_text`]: one token per non-empty piece, its position the piece's number.
///
/// Analysis runs once, on the caller's side, for the index and for each tool's word list alike;
/// the text tantivy tokenizes on its indexing thread is already analysed. (Pre-tokenized values
/// would do the same, but tantivy stores them in a document as JSON and parses them back, which
/// cost more than the analysis itself.)
#[derive(Clone, Default)]
struct SpacedTokenizer {
    token: TantivyToken,
}

struct SpacedTokens<'a> {
    text: &'a str,
    pieces: std::str::Split<'a, char>,
    next_position: usize,
    token: &'a mut TantivyToken,
}

impl Tokenizer for SpacedTokenizer {
    type TokenStream<'a> = SpacedTokens<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> SpacedTokens<'a> {
        self.token.reset();
        SpacedTokens {
            text,
            pieces: text.split(' '),
            next_position: 0,
            token: &mut self.token,
        }
    }
}

impl TokenStream for SpacedTokens<'_> {
    fn advance(&mut self) -> bool {
        for piece in self.pieces.by_ref() {
            let position = self.next_position;
            self.next_position += 1;
            if piece.is_empty() {
                continue;
            }
            let offset = piece.as_ptr() as usize - self.text.as_ptr() as usize;
            self.token.text.clear();
            self.token.text.push_str(piece);
            self.token.position = position;
            self.token.offset_from = offset;
            self.token.offset_to = offset + piece.len();
            return true;
        }
        false
    }

    fn token(&self) -> &TantivyToken {
        self.token
    }

    fn token_mut(&mut self) -> &mut TantivyToken {
        self.token
    }
}

#[cfg(test)]
mod spaced_tests {
    use super::*;

    #[test]
    fn spaced_text_round_trips_tokens_and_positions() {
        let tool = Tool::new("list_files", "Lists the files of a folder").with_schema(
            serde_json::json!({"type": "object", "properties": {
                "path": {"type": "string"}, "maxResults": {"type": "integer"}
            }}),
        );
        let mut vocabulary = Vocabulary::default();
        let analyzed = vocabulary.analyze(&Analyzer::new(), &tool).unwrap();
        for field in [Field::Description, Field::ParamNames] {
            let tokens = &analyzed.fields[field as usize];
            let text = spaced_text(tokens, |t| vocabulary.word(t.raw));
            let mut tokenizer = SpacedTokenizer::default();
            let mut stream = tokenizer.token_stream(&text);
            let mut read = Vec::new();
            while let Some(token) = stream.next() {
                read.push((token.text.clone(), token.position as u32));
            }
            let expected: Vec<(String, u32)> = tokens
                .iter()
                .map(|t| (vocabulary.word(t.raw).to_string(), t.position))
                .collect();
            assert_eq!(read, expected);
        }
        let description = &analyzed.fields[Field::Description as usize];
        assert_eq!(vocabulary.word(description[1].raw), "files");
        assert_eq!(description[1].position, 2);
        // Values of a multi-valued field stand apart.
        let params = &analyzed.fields[Field::ParamNames as usize];
        assert!(params[1].position > params[0].position + 1);
    }
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
    }

    #[test]
    fn slots_named_checks_the_names_it_finds() {
        let mut index = ToolIndex::new().unwrap();
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
