//! The MCP stdio transport of the gateway: newline-delimited JSON-RPC on stdin/stdout, like
//! rmcp's own, except that a line that is not a message gets an answer instead of silence:
//!
//! - a line that is not JSON: `-32700` (parse error), id `null`;
//! - JSON that is not a JSON-RPC message (wrong `jsonrpc`, a batch, a bad `id`, a line longer than
//!   [`MAX_LINE_BYTES`]): `-32600` (invalid request), with the line's `id` when it has a usable one;
//! - a notification, a response or an error object that does not parse: logged and dropped, since
//!   JSON-RPC never answers those.
//!
//! The session stays open in every case, so a client that sent a broken line learns why at once
//! rather than waiting forever for an answer.

use std::future::Future;
use std::sync::Arc;

use rmcp::model::{ErrorData, NumberOrString, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleServer;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// The longest line read as a message; longer lines are answered `-32600` and skipped.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// A server transport over a reader (stdin) and a writer (stdout).
pub struct LineTransport<R, W> {
    read: BufReader<R>,
    /// The line being read; kept across cancelled reads (`receive` runs inside a `select!`).
    line: Vec<u8>,
    /// Set while skipping the rest of an over-long line.
    discarding: bool,
    write: Arc<Mutex<W>>,
    /// Error answers being written; awaited before reporting the end of input.
    replies: Vec<JoinHandle<()>>,
}

/// The stdio transport: stdin and stdout.
pub fn stdio() -> LineTransport<tokio::io::Stdin, tokio::io::Stdout> {
    LineTransport::new(tokio::io::stdin(), tokio::io::stdout())
}

enum LineRead {
    Line,
    Oversized,
    Eof,
    Io(std::io::Error),
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub fn new(read: R, write: W) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: false,
            write: Arc::new(Mutex::new(write)),
            replies: Vec::new(),
        }
    }

    /// Reads up to and including the next `\n` into `self.line`, never past [`MAX_LINE_BYTES`].
    /// Cancel-safe: nothing is consumed from the reader without being kept in `self.line`.
    async fn read_line(&mut self) -> LineRead {
        loop {
            let available = match self.read.fill_buf().await {
                Ok(available) => available,
                Err(e) => return LineRead::Io(e),
            };
            if available.is_empty() {
                return LineRead::Eof;
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            let mut outcome = None;
            if self.discarding {
                if newline.is_some() {
                    self.discarding = false;
                }
            } else if self.line.len().saturating_add(take) > MAX_LINE_BYTES {
                self.line.clear();
                self.discarding = newline.is_none();
                outcome = Some(LineRead::Oversized);
            } else {
                self.line.extend_from_slice(&available[..take]);
                if newline.is_some() {
                    outcome = Some(LineRead::Line);
                }
            }
            self.read.consume(take);
            if let Some(outcome) = outcome {
                return outcome;
            }
        }
    }

    /// Writes an error answer without blocking the reading of the next line.
    fn reply(&mut self, error: ErrorData, id: Option<RequestId>) {
        let message = TxJsonRpcMessage::<RoleServer>::error(error, id);
        let write = self.write.clone();
        self.replies.retain(|h| !h.is_finished());
        self.replies.push(tokio::spawn(async move {
            if let Err(e) = write_message(&write, &message).await {
                tracing::warn!(error = %e, "cannot write an error answer to stdout");
            }
        }));
    }
}

async fn write_message<W: AsyncWrite + Unpin>(
    write: &Mutex<W>,
    message: &TxJsonRpcMessage<RoleServer>,
) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(message)?;
    bytes.push(b'\n');
    let mut write = write.lock().await;
    write.write_all(&bytes).await?;
    write.flush().await
}

/// What one input line is.
enum Incoming {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    Skip,
    Answer(ErrorData, Option<RequestId>),
}

fn classify(line: &[u8]) -> Incoming {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Incoming::Skip;
    }
    let error = match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
        Ok(message) => return Incoming::Message(Box::new(message)),
        Err(e) => e,
    };
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => {
            return Incoming::Answer(
                ErrorData::parse_error(
                    format!(
                    "Parse error: the line is not JSON ({e}); send one JSON-RPC message per line"
                ),
                    None,
                ),
                None,
            )
        }
    };
    let Some(object) = value.as_object() else {
        let what = if value.is_array() {
            "a batch (array); batches are not supported, send one message per line"
        } else {
            "not a JSON object; send one JSON-RPC message object per line"
        };
        return Incoming::Answer(
            ErrorData::invalid_request(format!("Invalid request: the line is {what}"), None),
            None,
        );
    };
    let has_id = object.contains_key("id");
    if !object.contains_key("method")
        && (object.contains_key("result") || object.contains_key("error"))
    {
        tracing::warn!(error = %error, "dropping a response from the client that does not parse");
        return Incoming::Skip;
    }
    if object.contains_key("method") && !has_id {
        tracing::warn!(error = %error, "dropping a notification from the client that does not parse");
        return Incoming::Skip;
    }
    let id = match object.get("id") {
        Some(Value::String(s)) => Some(NumberOrString::String(s.as_str().into())),
        Some(Value::Number(n)) => n.as_i64().map(NumberOrString::Number),
        _ => None,
    };
    Incoming::Answer(
        ErrorData::invalid_request(
            format!(
                "Invalid request: {error}; a request is {{\"jsonrpc\": \"2.0\", \"id\": <number or string>, \"method\": \"...\", \"params\": {{...}}}}"
            ),
            None,
        ),
        id,
    )
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = self.write.clone();
        async move { write_message(&write, &item).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read_line().await {
                LineRead::Line => {}
                LineRead::Oversized => {
                    tracing::warn!(max = MAX_LINE_BYTES, "skipping an over-long input line");
                    self.reply(
                        ErrorData::invalid_request(
                            format!("Invalid request: a line longer than {MAX_LINE_BYTES} bytes was skipped; send smaller messages"),
                            None,
                        ),
                        None,
                    );
                    continue;
                }
                LineRead::Eof => {
                    for reply in self.replies.drain(..) {
                        let _ = reply.await;
                    }
                    return None;
                }
                LineRead::Io(e) => {
                    tracing::error!(error = %e, "cannot read stdin; ending the session");
                    return None;
                }
            }
            let incoming = classify(&self.line);
            self.line.clear();
            match incoming {
                Incoming::Message(message) => return Some(*message),
                Incoming::Skip => {}
                Incoming::Answer(error, id) => {
                    tracing::debug!(code = error.code.0, message = %error.message, "answering a malformed input line");
                    self.reply(error, id);
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        for reply in self.replies.drain(..) {
            let _ = reply.await;
        }
        self.write.lock().await.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> (i32, Option<RequestId>) {
        match classify(line.as_bytes()) {
            Incoming::Answer(error, id) => (error.code.0, id),
            Incoming::Message(m) => panic!("{line} parsed as {m:?}"),
            Incoming::Skip => panic!("{line} skipped"),
        }
    }

    #[test]
    fn lines_are_classified() {
        assert_eq!(answer("this is not json"), (-32700, None));
        assert_eq!(answer("{\"jsonrpc\":\"2.0\",\"id\":1,"), (-32700, None));
        assert_eq!(answer("[1, 2]"), (-32600, None));
        assert_eq!(answer("42"), (-32600, None));
        assert_eq!(
            answer(r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#),
            (-32600, Some(NumberOrString::Number(7)))
        );
        assert_eq!(
            answer(r#"{"jsonrpc":"2.0","id":"x"}"#),
            (-32600, Some(NumberOrString::String("x".into())))
        );
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Incoming::Message(_)
        ));
        assert!(matches!(classify(b"   \r\n"), Incoming::Skip));
        assert!(matches!(
            classify(br#"{"jsonrpc":"1.0","method":"notifications/initialized"}"#),
            Incoming::Skip
        ));
    }
}
