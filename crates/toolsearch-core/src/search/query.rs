//! The keyword query language: `a b` (OR), `a AND b`, `a OR b`, `"a phrase"`, `pre*`, `field:term`,
//! and parentheses. A query that does not parse is read as plain words: never an error.
//!
//! Parentheses nest at most [`MAX_NESTING`] deep. A deeper query is broken syntax like any other
//! and is read as plain words, so the tree the parser builds (and every walk over it: evaluation,
//! printing, dropping) stays shallow whatever the input: a request of thousands of `(` must not
//! exhaust the stack of the thread serving it.

/// How deep parentheses may nest; deeper queries are read as plain words.
pub const MAX_NESTING: usize = 32;

/// Which part of a tool a clause is restricted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldScope {
    Name,
    Description,
    Params,
    Server,
    Category,
    Tags,
}

impl FieldScope {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.to_ascii_lowercase().as_str() {
            "name" => Self::Name,
            "description" | "desc" => Self::Description,
            "params" | "param" | "parameters" | "args" => Self::Params,
            "server" => Self::Server,
            "category" => Self::Category,
            "tags" | "tag" => Self::Tags,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Query {
    Or(Vec<Query>),
    And(Vec<Query>),
    /// One word as typed; analysis may split it (`get_weather` is two tokens).
    Term {
        field: Option<FieldScope>,
        text: String,
    },
    Phrase {
        field: Option<FieldScope>,
        text: String,
    },
    Prefix {
        field: Option<FieldScope>,
        prefix: String,
    },
}

impl Query {
    /// Parses the keyword syntax, falling back to plain words when the syntax is broken.
    #[cfg(test)]
    pub fn parse(input: &str) -> Query {
        Self::parse_words(input).0
    }

    /// The query, and whether it is nothing but words: every whitespace-separated piece of the
    /// input a term of its own (no operator, parenthesis, quote, field or prefix). Such a
    /// query's terms, analysed one by one, give the input's own words in order.
    pub fn parse_words(input: &str) -> (Query, bool) {
        let Some(lexemes) = lex(input) else {
            return (Self::plain_words(input), false);
        };
        let words_only = lexemes
            .iter()
            .all(|l| matches!(l, Lexeme::Word(w) if !w.ends_with('*')));
        let mut parser = Parser {
            lexemes,
            pos: 0,
            depth: 0,
        };
        match parser.parse_all() {
            Some(q) => (q, words_only),
            None => (Self::plain_words(input), false),
        }
    }

    /// Every whitespace-separated word as an OR'ed term, syntax characters dropped.
    pub fn plain_words(input: &str) -> Query {
        let words = input
            .split(|c: char| c.is_whitespace() || matches!(c, '"' | '(' | ')' | '*'))
            .filter(|w| !w.is_empty() && *w != "AND" && *w != "OR")
            .map(|w| Query::Term {
                field: None,
                text: w.to_string(),
            })
            .collect();
        Query::Or(words)
    }

    /// Whether the query uses any operator beyond plain words.
    pub fn is_plain(&self) -> bool {
        match self {
            Query::Or(items) => items
                .iter()
                .all(|q| matches!(q, Query::Term { field: None, .. })),
            Query::Term { field: None, .. } => true,
            _ => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Lexeme {
    Word(String),
    Quoted(String),
    Field(FieldScope),
    Open,
    Close,
    And,
    Or,
}

struct Parser {
    lexemes: Vec<Lexeme>,
    pos: usize,
    /// Open parentheses around the current position.
    depth: usize,
}

impl Parser {
    fn parse_all(&mut self) -> Option<Query> {
        if self.lexemes.is_empty() {
            return Some(Query::Or(Vec::new()));
        }
        let q = self.parse_or()?;
        (self.pos == self.lexemes.len()).then_some(q)
    }

    fn peek(&self) -> Option<&Lexeme> {
        self.lexemes.get(self.pos)
    }

    fn parse_or(&mut self) -> Option<Query> {
        let mut items = vec![self.parse_and()?];
        loop {
            match self.peek() {
                None | Some(Lexeme::Close) => break,
                Some(Lexeme::Or) => {
                    self.pos += 1;
                    items.push(self.parse_and()?);
                }
                Some(_) => items.push(self.parse_and()?),
            }
        }
        Some(if items.len() == 1 {
            items.remove(0)
        } else {
            Query::Or(items)
        })
    }

    fn parse_and(&mut self) -> Option<Query> {
        let mut items = vec![self.parse_unary()?];
        while self.peek() == Some(&Lexeme::And) {
            self.pos += 1;
            items.push(self.parse_unary()?);
        }
        Some(if items.len() == 1 {
            items.remove(0)
        } else {
            Query::And(items)
        })
    }

    fn parse_unary(&mut self) -> Option<Query> {
        let lexeme = self.lexemes.get(self.pos)?.clone();
        self.pos += 1;
        match lexeme {
            Lexeme::Open => {
                // Refused before recursing: the recursion depth is bounded by MAX_NESTING.
                if self.depth >= MAX_NESTING {
                    return None;
                }
                self.depth += 1;
                let q = self.parse_or();
                self.depth -= 1;
                let q = q?;
                (self.lexemes.get(self.pos) == Some(&Lexeme::Close)).then(|| self.pos += 1)?;
                Some(q)
            }
            Lexeme::Field(field) => {
                let atom = self.lexemes.get(self.pos)?.clone();
                self.pos += 1;
                atom_query(Some(field), atom)
            }
            other => atom_query(None, other),
        }
    }
}

fn atom_query(field: Option<FieldScope>, lexeme: Lexeme) -> Option<Query> {
    match lexeme {
        Lexeme::Quoted(text) => Some(Query::Phrase { field, text }),
        Lexeme::Word(word) => match word.strip_suffix('*') {
            Some(prefix) if !prefix.is_empty() && !prefix.contains('*') => Some(Query::Prefix {
                field,
                prefix: prefix.to_string(),
            }),
            Some(_) => None,
            None => Some(Query::Term { field, text: word }),
        },
        _ => None,
    }
}

fn lex(input: &str) -> Option<Vec<Lexeme>> {
    let mut out = Vec::new();
    let mut chars = input.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '(' {
            chars.next();
            out.push(Lexeme::Open);
        } else if c == ')' {
            chars.next();
            out.push(Lexeme::Close);
        } else if c == '"' {
            chars.next();
            let mut text = String::new();
            let mut closed = false;
            for (_, c) in chars.by_ref() {
                if c == '"' {
                    closed = true;
                    break;
                }
                text.push(c);
            }
            if !closed {
                return None;
            }
            out.push(Lexeme::Quoted(text));
        } else {
            let mut end = input.len();
            while let Some(&(i, c)) = chars.peek() {
                if c.is_whitespace() || matches!(c, '(' | ')' | '"') {
                    end = i;
                    break;
                }
                chars.next();
            }
            let word = &input[start..end];
            match word {
                "AND" | "&&" => out.push(Lexeme::And),
                "OR" | "||" => out.push(Lexeme::Or),
                _ => {
                    let field = word
                        .strip_suffix(':')
                        .or_else(|| word.split_once(':').map(|(f, _)| f))
                        .and_then(FieldScope::parse);
                    match (field, word.split_once(':')) {
                        (Some(field), Some((_, ""))) => out.push(Lexeme::Field(field)),
                        (Some(field), Some((_, rest))) => {
                            out.push(Lexeme::Field(field));
                            out.push(Lexeme::Word(rest.to_string()));
                        }
                        _ => out.push(Lexeme::Word(word.to_string())),
                    }
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(t: &str) -> Query {
        Query::Term {
            field: None,
            text: t.into(),
        }
    }

    #[test]
    fn words_are_ored() {
        assert_eq!(
            Query::parse("send email"),
            Query::Or(vec![term("send"), term("email")])
        );
        assert!(Query::parse("send email").is_plain());
    }

    #[test]
    fn and_binds_tighter_than_or() {
        assert_eq!(
            Query::parse("a AND b OR c"),
            Query::Or(vec![Query::And(vec![term("a"), term("b")]), term("c")])
        );
        assert_eq!(
            Query::parse("(a OR b) AND c"),
            Query::And(vec![Query::Or(vec![term("a"), term("b")]), term("c")])
        );
    }

    #[test]
    fn phrases_prefixes_and_fields() {
        assert_eq!(
            Query::parse("\"create issue\""),
            Query::Phrase {
                field: None,
                text: "create issue".into()
            }
        );
        assert_eq!(
            Query::parse("git*"),
            Query::Prefix {
                field: None,
                prefix: "git".into()
            }
        );
        assert_eq!(
            Query::parse("server:github"),
            Query::Term {
                field: Some(FieldScope::Server),
                text: "github".into()
            }
        );
        assert_eq!(
            Query::parse("name:\"read file\""),
            Query::Phrase {
                field: Some(FieldScope::Name),
                text: "read file".into()
            }
        );
        assert_eq!(
            Query::parse("tags: files"),
            Query::Term {
                field: Some(FieldScope::Tags),
                text: "files".into()
            }
        );
        assert!(!Query::parse("name:x").is_plain());
    }

    #[test]
    fn unknown_fields_are_words() {
        assert_eq!(
            Query::parse("http://example.com"),
            term("http://example.com")
        );
    }

    #[test]
    fn broken_syntax_falls_back_to_plain_words() {
        assert_eq!(
            Query::parse("\"unclosed quote"),
            Query::Or(vec![term("unclosed"), term("quote")])
        );
        assert_eq!(Query::parse("a AND"), Query::Or(vec![term("a")]));
        assert_eq!(Query::parse("(a b"), Query::Or(vec![term("a"), term("b")]));
        assert_eq!(Query::parse("a)"), Query::Or(vec![term("a")]));
        assert_eq!(Query::parse("*"), Query::Or(vec![]));
        assert_eq!(Query::parse(""), Query::Or(vec![]));
    }

    /// The depth of the tree: an `Or`/`And` adds one level.
    fn depth(q: &Query) -> usize {
        match q {
            Query::Or(items) | Query::And(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    #[test]
    fn nesting_up_to_the_limit_is_parsed() {
        let nested = format!(
            "{}a OR b{}",
            "(".repeat(MAX_NESTING),
            ")".repeat(MAX_NESTING)
        );
        assert_eq!(Query::parse(&nested), Query::Or(vec![term("a"), term("b")]));
        let grouped = format!(
            "x AND {}a b{}",
            "(".repeat(MAX_NESTING),
            ")".repeat(MAX_NESTING)
        );
        assert_eq!(
            Query::parse(&grouped),
            Query::And(vec![term("x"), Query::Or(vec![term("a"), term("b")])])
        );
    }

    #[test]
    fn nesting_beyond_the_limit_is_read_as_plain_words() {
        let deep = MAX_NESTING + 1;
        let nested = format!("{}a AND b{}", "(".repeat(deep), ")".repeat(deep));
        assert_eq!(Query::parse(&nested), Query::Or(vec![term("a"), term("b")]));
    }

    /// 100,000 nested parentheses once overflowed the stack of the parsing thread (and with it
    /// the whole process); now they are plain words, and the tree is flat.
    #[test]
    fn a_hundred_thousand_nested_parentheses_do_not_overflow_the_stack() {
        let n = 100_000;
        for query in [
            format!("{}x{}", "(".repeat(n), ")".repeat(n)),
            "(".repeat(n),
            format!("{}send email", "( a AND ".repeat(n)),
        ] {
            let parsed = Query::parse(&query);
            assert!(depth(&parsed) <= MAX_NESTING + 2, "{}", depth(&parsed));
        }
        assert_eq!(
            Query::parse(&format!("{}x{}", "(".repeat(n), ")".repeat(n))),
            Query::Or(vec![term("x")])
        );
    }
}
