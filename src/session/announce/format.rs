//! The announcement's records: what one session says of itself and the names it uses, in a
//! versioned text format that every reader, older or newer, reads as far as it knows it
//! (described on [`Announcement`]), and how a session's names are laid out in them.

use super::ANNOUNCE_SEMAPHORE;
use crate::config::MAX_DATA_LEN;

/// The most bytes of a session's record on [`ANNOUNCE_SEMAPHORE`]: every announcing session
/// of a node is one owner of that semaphore, and a describe of it carries them all, so the
/// record is kept small (10,000 sessions then fit in gRPC's default 4 MiB message). The
/// names that do not fit go to pages.
pub const ANNOUNCE_LIMIT: usize = 384;

/// The most bytes of one page of names (a name longer than that takes a page of its own).
pub const PAGE_LIMIT: usize = 16 * 1024;

/// The first line of a session's record; readers of every version read it.
const HEADER: &str = "ydb-coordination announce 1";
/// The first line of a page.
const PAGE_HEADER: &str = "ydb-coordination announce page";
/// The version this library writes.
pub(crate) const VERSION: u32 = 2;

/// The longest description, host and program name a record carries, in bytes (cut on a
/// character boundary).
const DESCRIPTION_KEPT: usize = 64;
const HOST_KEPT: usize = 64;
const TOOL_KEPT: usize = 24;

/// The semaphore of page `page` (from 1) of the announcement of session `session_id`: a name
/// under the reserved prefix, held by that session alone.
///
/// # Examples
///
/// ```
/// use ydb_coordination::session::page_semaphore;
///
/// assert_eq!(page_semaphore(7, 1), "ydb-coordination:sessions/7/1");
/// ```
pub fn page_semaphore(session_id: u64, page: u64) -> String {
    format!("{ANNOUNCE_SEMAPHORE}/{session_id}/{page}")
}

/// A name a session announces, and what it does with it.
///
/// # Examples
///
/// ```
/// use ydb_coordination::session::Announced;
///
/// let held = Announced::held("job", 1_700_000_000_000);
/// assert_eq!(held.held, Some(true));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Announced {
    /// The semaphore.
    pub name: String,
    /// `Some(true)`: held; `Some(false)`: waited for; `None`: not said (a version 1 record).
    pub held: Option<bool>,
    /// Since when, in Unix milliseconds: granted (held) or asked for (waited for).
    pub since_ms: Option<u64>,
}

impl Announced {
    /// `name`, held since `since_ms` (Unix milliseconds).
    pub fn held(name: impl Into<String>, since_ms: u64) -> Self {
        Self {
            name: name.into(),
            held: Some(true),
            since_ms: Some(since_ms),
        }
    }

    /// `name`, waited for since `since_ms` (Unix milliseconds).
    pub fn waiting(name: impl Into<String>, since_ms: u64) -> Self {
        Self {
            name: name.into(),
            held: Some(false),
            since_ms: Some(since_ms),
        }
    }

    /// `name`, without saying what the session does with it (as version 1 records).
    pub fn listed(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            held: None,
            since_ms: None,
        }
    }

    /// Its lines: `n`, then `g` or `w` with the time.
    fn lines(&self) -> String {
        let mut out = line("n", &self.name);
        match (self.held, self.since_ms) {
            (Some(true), Some(ms)) => out.push_str(&line("g", &ms.to_string())),
            (Some(false), Some(ms)) => out.push_str(&line("w", &ms.to_string())),
            _ => {}
        }
        out
    }
}

/// Where the names that do not fit in a session's record are: `count` pages, written in
/// `generation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pages {
    /// How many pages, numbered from 1 (see [`page_semaphore`]).
    pub count: u64,
    /// The generation every page must carry: a page of another one was read while the
    /// session rewrote them.
    pub generation: u64,
}

/// What one session announces: the owner data of its unit of [`ANNOUNCE_SEMAPHORE`].
///
/// # Format
///
/// A record is lines of `tag value` (a backslash, a line feed and a carriage return in a
/// value escaped as `\\`, `\n`, `\r`). Its first line is the header; a reader skips the tags
/// it does not know, so that a later version can add lines and every earlier reader still
/// reads the others.
///
/// The session's record, the owner data of its unit of [`ANNOUNCE_SEMAPHORE`] (at most
/// [`ANNOUNCE_LIMIT`] bytes), starts with `ydb-coordination announce 1`: a reader of version
/// 1 reads the description (`d`), the names listed (`n`) and how many more there are (`+`).
/// Version 2 (`v 2`) adds who the session is: its host (`h`), process id (`p`), program
/// (`t`), when it started (`s`, Unix milliseconds), its session timeout (`o`, milliseconds)
/// and when its record was last sent (`c`, Unix milliseconds: the server had contact with it
/// at that time or later); after each name, since when it is held (`g`) or waited for (`w`);
/// and where the names that do not fit are: `P <pages> <generation>`, the pages being the
/// owner data of the session's unit of [`page_semaphore`]`(session, 1..=pages)`, each at most
/// [`PAGE_LIMIT`] bytes (one name longer than that takes a page of its own), headed
/// `ydb-coordination announce page` and carrying the generation (`r`) they were written
/// in. Pages are written before the record that names them, and all of them again when any
/// changes: a reader that finds a page of another generation read them while they changed,
/// and reads again. `x <count>` counts names too long for any page (over the server's 1 MiB
/// data limit), which are nowhere.
///
///
/// # Examples
///
/// ```
/// use ydb_coordination::session::{Announced, Announcement};
///
/// let mut a = Announcement::new("billing worker 7");
/// a.names.push(Announced::held("job", 1_700_000_000_000));
/// let parsed = Announcement::parse(&a.encode()).unwrap();
/// assert_eq!(parsed.names, a.names);
/// assert_eq!(parsed.names_with(&[]).unwrap().len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Announcement {
    /// The format's version the record was written in (1 without a `v` line).
    pub version: u32,
    /// The session's description (cut to 64 bytes).
    pub description: String,
    /// The host the session runs on (empty when not said).
    pub host: String,
    /// The process id.
    pub pid: Option<u32>,
    /// The program (the executable's name).
    pub tool: String,
    /// When the session started, in Unix milliseconds.
    pub started_ms: Option<u64>,
    /// The session's timeout, in milliseconds: the server ends it that long after its last
    /// contact.
    pub timeout_ms: Option<u64>,
    /// When the record was sent, in Unix milliseconds: the server had contact with the
    /// session then or later. A session that holds or waits for a name sends it again once
    /// per session timeout.
    pub contact_ms: Option<u64>,
    /// The names listed in this record, sorted.
    pub names: Vec<Announced>,
    /// How many more names the session uses: on its [pages](Announcement::pages), or (in a
    /// version 1 record) left out.
    pub elsewhere: usize,
    /// Where the other names are.
    pub pages: Option<Pages>,
    /// Names too long to announce anywhere: the record is incomplete by that many.
    pub unlisted: usize,
}

/// One page of names of an [`Announcement`].
///
/// # Examples
///
/// ```
/// use ydb_coordination::session::{Announced, Page};
///
/// let page = Page { generation: 3, names: vec![Announced::waiting("pool", 1_700_000_000_000)] };
/// assert_eq!(Page::parse(&page.encode()), Some(page));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// The generation it was written in.
    pub generation: u64,
    /// Its names, sorted.
    pub names: Vec<Announced>,
}

/// Why the names of an announcement cannot be told whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Gap {
    /// A version 1 record that left out this many names.
    LeftOut(usize),
    /// This many names were too long to announce.
    Unlisted(usize),
    /// Fewer pages were given than the record names, or a page of another generation: they
    /// changed while read. Read them again.
    Torn,
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gap::LeftOut(n) => write!(f, "{n} names left out of its announcement"),
            Gap::Unlisted(n) => write!(f, "{n} names too long to announce"),
            Gap::Torn => write!(f, "its announcement changed while it was read"),
        }
    }
}

impl Announcement {
    /// An empty version-2 record with `description` (no names, nothing else said).
    pub fn new(description: &str) -> Self {
        Self {
            version: VERSION,
            description: description.to_string(),
            ..Self::default()
        }
    }

    /// How many pages the names not listed here are on (0: none).
    pub fn page_count(&self) -> u64 {
        self.pages.map_or(0, |p| p.count)
    }

    /// Every name the session announces: those listed here and on `pages` (page 1 first,
    /// as many as [`Announcement::page_count`]), sorted; or why they cannot be told whole.
    ///
    /// # Errors
    ///
    /// [`Gap::LeftOut`] for a version 1 record that left names out, [`Gap::Unlisted`] for
    /// names too long to announce, [`Gap::Torn`] for missing pages or pages of another
    /// generation.
    pub fn names_with(&self, pages: &[Page]) -> Result<Vec<Announced>, Gap> {
        if self.unlisted > 0 {
            return Err(Gap::Unlisted(self.unlisted));
        }
        let Some(expected) = self.pages else {
            return match self.elsewhere {
                0 => Ok(self.names.clone()),
                n => Err(Gap::LeftOut(n)),
            };
        };
        let count = usize::try_from(expected.count).unwrap_or(usize::MAX);
        if pages.len() != count || pages.iter().any(|p| p.generation != expected.generation) {
            return Err(Gap::Torn);
        }
        let mut all = self.names.clone();
        all.extend(pages.iter().flat_map(|p| p.names.iter().cloned()));
        if all.len() != self.names.len() + self.elsewhere {
            return Err(Gap::Torn);
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    /// The record's bytes, as it is (the session's own records are made to fit
    /// [`ANNOUNCE_LIMIT`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.identity();
        for n in &self.names {
            out.push_str(&n.lines());
        }
        out.push_str(&self.tail());
        out.into_bytes()
    }

    /// The lines before the names.
    fn identity(&self) -> String {
        let mut out = format!("{HEADER}\n");
        if self.version >= 2 {
            out.push_str(&line("v", &self.version.to_string()));
        }
        out.push_str(&line("d", &self.description));
        let mut put = |tag: &str, value: Option<String>| {
            if let Some(v) = value.filter(|v| !v.is_empty()) {
                out.push_str(&line(tag, &v));
            }
        };
        put("h", Some(self.host.clone()));
        put("p", self.pid.map(|p| p.to_string()));
        put("t", Some(self.tool.clone()));
        put("s", self.started_ms.map(|v| v.to_string()));
        put("o", self.timeout_ms.map(|v| v.to_string()));
        put("c", self.contact_ms.map(|v| v.to_string()));
        out
    }

    /// The lines after the names.
    fn tail(&self) -> String {
        let mut out = String::new();
        if self.elsewhere > 0 {
            out.push_str(&line("+", &self.elsewhere.to_string()));
        }
        if let Some(p) = self.pages {
            out.push_str(&line("P", &format!("{} {}", p.count, p.generation)));
        }
        if self.unlisted > 0 {
            out.push_str(&line("x", &self.unlisted.to_string()));
        }
        out
    }

    /// Reads a session's record (of any version); `None` when it is not one.
    pub fn parse(data: &[u8]) -> Option<Self> {
        let mut lines = records(data, HEADER)?;
        let mut out = Self {
            version: 1,
            ..Self::default()
        };
        let number = |v: &str| v.parse::<u64>().ok();
        for (tag, value) in lines.by_ref() {
            match tag {
                "v" => out.version = value.parse().ok()?,
                "d" => out.description = value,
                "h" => out.host = value,
                "p" => out.pid = value.parse().ok(),
                "t" => out.tool = value,
                "s" => out.started_ms = number(&value),
                "o" => out.timeout_ms = number(&value),
                "c" => out.contact_ms = number(&value),
                "n" => out.names.push(Announced::listed(value)),
                "g" | "w" => since(&mut out.names, tag, &value),
                "+" => out.elsewhere = value.parse().ok()?,
                "x" => out.unlisted = value.parse().ok()?,
                "P" => {
                    let (count, generation) = value.split_once(' ')?;
                    out.pages = Some(Pages {
                        count: count.parse().ok()?,
                        generation: generation.parse().ok()?,
                    });
                }
                // Lines of a later version of the format.
                _ => {}
            }
        }
        Some(out)
    }
}

impl Page {
    /// The page's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = format!("{PAGE_HEADER}\n");
        out.push_str(&line("r", &self.generation.to_string()));
        for n in &self.names {
            out.push_str(&n.lines());
        }
        out.into_bytes()
    }

    /// Reads a page; `None` when it is not one.
    pub fn parse(data: &[u8]) -> Option<Self> {
        let mut out = Self::default();
        let mut generation = None;
        for (tag, value) in records(data, PAGE_HEADER)? {
            match tag {
                "r" => generation = Some(value.parse().ok()?),
                "n" => out.names.push(Announced::listed(value)),
                "g" | "w" => since(&mut out.names, tag, &value),
                _ => {}
            }
        }
        out.generation = generation?;
        Some(out)
    }
}

/// The lines after `header` as (tag, unescaped value); `None` when the header differs.
fn records<'a>(
    data: &'a [u8],
    header: &str,
) -> Option<impl Iterator<Item = (&'a str, String)> + 'a> {
    let text = std::str::from_utf8(data).ok()?;
    let mut lines = text.lines();
    if lines.next()? != header {
        return None;
    }
    Some(lines.map(|l| {
        let (tag, value) = l.split_once(' ').unwrap_or((l, ""));
        (tag, unescape(value))
    }))
}

/// A `g` or `w` line: the last name is held or waited for since `value`.
fn since(names: &mut [Announced], tag: &str, value: &str) {
    if let Some(last) = names.last_mut() {
        last.held = Some(tag == "g");
        last.since_ms = value.parse().ok();
    }
}

/// Who a session is, in its record (each cut to what the record keeps).
#[derive(Debug, Clone, Default)]
pub(crate) struct Identity {
    pub(crate) description: String,
    pub(crate) host: String,
    pub(crate) pid: Option<u32>,
    pub(crate) tool: String,
    pub(crate) started_ms: Option<u64>,
    pub(crate) timeout_ms: Option<u64>,
}

impl Identity {
    /// Cut to what a record keeps.
    pub(crate) fn new(
        description: &str,
        host: &str,
        pid: u32,
        tool: &str,
        started_ms: u64,
        timeout_ms: u64,
    ) -> Self {
        Self {
            description: fit(description, DESCRIPTION_KEPT),
            host: fit(host, HOST_KEPT),
            pid: Some(pid),
            tool: fit(tool, TOOL_KEPT),
            started_ms: Some(started_ms),
            timeout_ms: Some(timeout_ms),
        }
    }
}

/// A session's names laid out: those its record lists, its pages, those too long for any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) listed: Vec<Announced>,
    pub(crate) pages: Vec<Vec<Announced>>,
    pub(crate) unlisted: usize,
}

impl Layout {
    /// Lays out `names` (sorted here, one entry a name: a held one over a waited one) for a
    /// record of `identity` sent at `contact_ms`, with the pages' next `generation`: the
    /// record lists the names in order while they fit in [`ANNOUNCE_LIMIT`] (the first that
    /// does not, and all after it, go to pages, as version 1 did, so a reader of version 1
    /// sees a prefix of the names and counts the rest), the pages take the rest in order,
    /// [`PAGE_LIMIT`] bytes each.
    pub(crate) fn new(
        identity: &Identity,
        contact_ms: u64,
        mut names: Vec<Announced>,
        generation: u64,
    ) -> Self {
        names.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| b.held.cmp(&a.held)));
        names.dedup_by(|later, first| later.name == first.name);
        let mut record = Announcement::from_identity(identity, contact_ms);
        let base = record.identity().len();
        let all: usize = names.iter().map(|n| n.lines().len()).sum();
        if base + all <= ANNOUNCE_LIMIT {
            return Self {
                listed: names,
                pages: Vec::new(),
                unlisted: 0,
            };
        }
        // Room for the tail at its largest: every name elsewhere, one page each, and the
        // count of those too long.
        record.elsewhere = names.len();
        record.pages = Some(Pages {
            count: u64::try_from(names.len()).unwrap_or(u64::MAX),
            generation,
        });
        record.unlisted = names.len();
        let room = ANNOUNCE_LIMIT.saturating_sub(base + record.tail().len());
        let mut used = 0;
        let mut rest = names.into_iter().peekable();
        let mut listed = Vec::new();
        while let Some(n) = rest.next_if(|n| used + n.lines().len() <= room) {
            used += n.lines().len();
            listed.push(n);
        }
        let page_head = Page {
            generation,
            names: Vec::new(),
        }
        .encode()
        .len();
        let mut pages: Vec<Vec<Announced>> = Vec::new();
        let mut size = 0;
        let mut unlisted = 0;
        for n in rest {
            let len = n.lines().len();
            if page_head + len > MAX_DATA_LEN {
                unlisted += 1;
                continue;
            }
            match pages.last_mut() {
                Some(page) if size + len <= PAGE_LIMIT => {
                    size += len;
                    page.push(n);
                }
                _ => {
                    size = page_head + len;
                    pages.push(vec![n]);
                }
            }
        }
        Self {
            listed,
            pages,
            unlisted,
        }
    }

    /// The session's record, sent at `contact_ms`, naming the pages of `generation`.
    pub(crate) fn record(&self, identity: &Identity, contact_ms: u64, generation: u64) -> Vec<u8> {
        let mut record = Announcement::from_identity(identity, contact_ms);
        record.names = self.listed.clone();
        let paged: usize = self.pages.iter().map(Vec::len).sum();
        record.elsewhere = paged;
        if !self.pages.is_empty() {
            record.pages = Some(Pages {
                count: u64::try_from(self.pages.len()).unwrap_or(u64::MAX),
                generation,
            });
        }
        record.unlisted = self.unlisted;
        record.encode()
    }

    /// Page `index` (from 0) of `generation`.
    pub(crate) fn page(&self, index: usize, generation: u64) -> Vec<u8> {
        Page {
            generation,
            names: self.pages.get(index).cloned().unwrap_or_default(),
        }
        .encode()
    }
}

impl Announcement {
    fn from_identity(identity: &Identity, contact_ms: u64) -> Self {
        Self {
            version: VERSION,
            description: identity.description.clone(),
            host: identity.host.clone(),
            pid: identity.pid,
            tool: identity.tool.clone(),
            started_ms: identity.started_ms,
            timeout_ms: identity.timeout_ms,
            contact_ms: Some(contact_ms),
            ..Self::default()
        }
    }
}

/// `tag value\n`, with backslashes and line breaks in `value` escaped.
fn line(tag: &str, value: &str) -> String {
    let mut out = String::with_capacity(tag.len() + value.len() + 2);
    out.push_str(tag);
    out.push(' ');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('\n');
    out
}

/// The bytes `c` takes in a value, escaped.
fn escaped_len(c: char) -> usize {
    match c {
        '\\' | '\n' | '\r' => 2,
        c => c.len_utf8(),
    }
}

fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// The longest prefix of `s` whose escaped form takes at most `max` bytes.
fn fit(s: &str, max: usize) -> String {
    let mut used = 0;
    let mut out = String::new();
    for c in s.chars() {
        let len = escaped_len(c);
        if used + len > max {
            break;
        }
        used += len;
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        Identity::new(
            "billing worker 7",
            "web-3",
            4411,
            "billing",
            1_700_000_000_000,
            10_000,
        )
    }

    fn held(i: usize) -> Announced {
        Announced::held(format!("name-{i:05}"), 1_700_000_000_000 + i as u64)
    }

    /// The record and pages of `layout`, read back as a reader would.
    fn read_back(layout: &Layout, generation: u64) -> (Announcement, Vec<Page>) {
        let record = Announcement::parse(&layout.record(&identity(), 5, generation)).unwrap();
        let pages = (0..layout.pages.len())
            .map(|i| Page::parse(&layout.page(i, generation)).unwrap())
            .collect();
        (record, pages)
    }

    #[test]
    fn a_few_names_fit_in_the_record_with_who_the_session_is() {
        let names = vec![
            Announced::waiting("pool", 1_700_000_000_500),
            Announced::held("job", 1_700_000_000_000),
        ];
        let layout = Layout::new(&identity(), 5, names, 1);
        assert!(layout.pages.is_empty());
        let (a, pages) = read_back(&layout, 1);
        assert_eq!(a.version, 2);
        assert_eq!(
            (a.host.as_str(), a.pid, a.tool.as_str()),
            ("web-3", Some(4411), "billing")
        );
        assert_eq!(
            (a.started_ms, a.timeout_ms, a.contact_ms),
            (Some(1_700_000_000_000), Some(10_000), Some(5))
        );
        let names = a.names_with(&pages).unwrap();
        assert_eq!(
            names,
            [
                Announced::held("job", 1_700_000_000_000),
                Announced::waiting("pool", 1_700_000_000_500)
            ]
        );
    }

    #[test]
    fn any_number_of_names_is_announced_whole_in_bounded_records() {
        for count in [0, 1, 5, 41, 500, 3000] {
            let names: Vec<Announced> = (0..count).map(held).collect();
            let layout = Layout::new(&identity(), u64::MAX, names.clone(), 9);
            assert!(layout.record(&identity(), u64::MAX, 9).len() <= ANNOUNCE_LIMIT);
            for i in 0..layout.pages.len() {
                assert!(layout.page(i, 9).len() <= PAGE_LIMIT, "{count}: page {i}");
            }
            let (a, pages) = read_back(&layout, 9);
            assert_eq!(a.names_with(&pages).unwrap(), names, "{count}");
        }
    }

    #[test]
    fn a_reader_of_version_1_sees_a_prefix_of_the_names_and_counts_the_rest() {
        let names: Vec<Announced> = (0..41).map(held).collect();
        let layout = Layout::new(&identity(), 5, names, 1);
        let record = layout.record(&identity(), 5, 1);
        // What a version 1 reader reads: the header, `d`, `n` and `+`.
        let text = String::from_utf8(record).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(HEADER));
        let listed = text.lines().filter(|l| l.starts_with("n ")).count();
        let more: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("+ "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(listed > 0);
        assert_eq!(listed + more, 41);
        for l in text.lines().skip(1) {
            let tag = l.split(' ').next().unwrap();
            assert!(
                [
                    "v", "d", "h", "p", "t", "s", "o", "c", "n", "g", "w", "+", "P"
                ]
                .contains(&tag),
                "{l}"
            );
        }
    }

    #[test]
    fn a_version_1_record_that_left_names_out_says_so() {
        let v1 = b"ydb-coordination announce 1\nd worker\nn a\n+ 14\n";
        let a = Announcement::parse(v1).unwrap();
        assert_eq!(a.version, 1);
        assert_eq!(a.names, [Announced::listed("a")]);
        assert_eq!(a.names_with(&[]), Err(Gap::LeftOut(14)));
        let whole = Announcement::parse(b"ydb-coordination announce 1\nd w\nn a\n").unwrap();
        assert_eq!(whole.names_with(&[]).unwrap(), [Announced::listed("a")]);
    }

    #[test]
    fn pages_of_another_generation_or_missing_ones_are_a_torn_read() {
        let names: Vec<Announced> = (0..3000).map(held).collect();
        let layout = Layout::new(&identity(), 5, names, 4);
        assert!(layout.pages.len() > 1);
        let (a, mut pages) = read_back(&layout, 4);
        assert!(a.names_with(&pages).is_ok());
        pages[1].generation = 5;
        assert_eq!(a.names_with(&pages), Err(Gap::Torn));
        pages.pop();
        assert_eq!(a.names_with(&pages), Err(Gap::Torn));
        assert_eq!(a.names_with(&[]), Err(Gap::Torn));
    }

    #[test]
    fn a_name_too_long_for_a_page_gets_its_own_and_one_over_the_data_limit_is_counted() {
        let long = Announced::held("l".repeat(PAGE_LIMIT * 2), 1);
        let huge = Announced::held("h".repeat(MAX_DATA_LEN), 1);
        let names = vec![held(1), long.clone(), huge, held(2)];
        let layout = Layout::new(&identity(), 5, names, 1);
        assert_eq!(layout.unlisted, 1);
        assert!(layout.pages.iter().any(|p| p == &vec![long.clone()]));
        let (a, pages) = read_back(&layout, 1);
        assert_eq!(a.names_with(&pages), Err(Gap::Unlisted(1)));
    }

    #[test]
    fn values_with_line_breaks_and_backslashes_round_trip_and_long_ones_are_cut() {
        let id = Identity::new(&"é\n\\".repeat(100), "h\r", 1, &"t".repeat(100), 0, 0);
        assert!(id.description.len() <= DESCRIPTION_KEPT);
        assert_eq!(id.tool.len(), TOOL_KEPT);
        let names = vec![Announced::held("a\nb\\n", 3)];
        let layout = Layout::new(&id, 5, names.clone(), 1);
        let a = Announcement::parse(&layout.record(&id, 5, 1)).unwrap();
        assert_eq!(a.description, id.description);
        assert_eq!(a.host, "h\r");
        assert_eq!(a.names_with(&[]).unwrap(), names);
    }

    #[test]
    fn a_held_name_is_announced_once_even_while_waited_for_again() {
        let names = vec![Announced::waiting("job", 9), Announced::held("job", 3)];
        let layout = Layout::new(&identity(), 5, names, 1);
        assert_eq!(layout.listed, [Announced::held("job", 3)]);
    }

    #[test]
    fn later_versions_lines_are_skipped_and_other_data_refused() {
        let later = format!("{HEADER}\nv 3\nd x\nq future\nn a\ng 4\nz\n");
        let a = Announcement::parse(later.as_bytes()).unwrap();
        assert_eq!(a.version, 3);
        assert_eq!(a.names, [Announced::held("a", 4)]);
        assert_eq!(Announcement::parse(b"held 7"), None);
        assert_eq!(Announcement::parse(&[0xff, 0xfe]), None);
        assert_eq!(Announcement::parse(b""), None);
        assert_eq!(Page::parse(b"ydb-coordination announce page\nn a\n"), None);
        assert_eq!(Page::parse(HEADER.as_bytes()), None);
    }
}
