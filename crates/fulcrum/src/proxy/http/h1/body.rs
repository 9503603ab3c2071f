//! How a message's body is framed (RFC 9112 section 6), and a reader that walks a body of any
//! framing over bytes as they arrive, telling payload from framing so a forwarder can copy either
//! on as it is, and knowing where the body ends (so where the next message starts).

use super::chunked::Chunked;
use super::{Limits, Refusal};

/// Where a body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body: a request without Content-Length or Transfer-Encoding (or with length 0), a
    /// response to HEAD, a 1xx, 204 or 304 response.
    Empty,
    Length(u64),
    Chunked,
    /// A response without a length: its body is everything until the server closes.
    UntilClose,
}

impl Framing {
    /// A response's framing (RFC 9112 section 6.3), its fields checked already: `chunked` is
    /// whether Transfer-Encoding is present and ends in chunked.
    pub fn of_response(status: u16, to_head: bool, length: Option<u64>, chunked: Option<bool>) -> Framing {
        if to_head || (100..200).contains(&status) || status == 204 || status == 304 {
            return Framing::Empty;
        }
        match (chunked, length) {
            (Some(true), _) => Framing::Chunked,
            // A coding other than chunked last: only the close ends it.
            (Some(false), _) => Framing::UntilClose,
            (None, Some(0)) => Framing::Empty,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::UntilClose,
        }
    }
}

/// What a step over the front of the unread bytes found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// This many payload bytes.
    Data(usize),
    /// This many framing bytes (a chunk-size line, a chunk's CRLF, a trailer field).
    Framing(usize),
    /// The body ends after this many more framing bytes (0 for a length or an empty body).
    Done(usize),
    /// Nothing can be decided without more bytes.
    NeedMore,
}

/// A body being read.
#[derive(Debug)]
pub struct BodyReader {
    state: State,
}

#[derive(Debug)]
enum State {
    Left(u64),
    Chunked(Chunked),
    UntilClose,
    Done,
}

impl BodyReader {
    pub fn new(framing: Framing, limits: &Limits) -> BodyReader {
        let state = match framing {
            Framing::Empty | Framing::Length(0) => State::Left(0),
            Framing::Length(n) => State::Left(n),
            Framing::Chunked => State::Chunked(Chunked::new(limits)),
            Framing::UntilClose => State::UntilClose,
        };
        BodyReader { state }
    }

    /// Decides about the front of `input` (the bytes read and not yet stepped over).
    pub fn step(&mut self, input: &[u8]) -> Result<Step, Refusal> {
        match &mut self.state {
            State::Done => Ok(Step::Done(0)),
            State::Left(0) => {
                self.state = State::Done;
                Ok(Step::Done(0))
            }
            State::Left(_) if input.is_empty() => Ok(Step::NeedMore),
            State::Left(n) => {
                let take = (*n).min(input.len() as u64);
                *n -= take;
                Ok(Step::Data(take as usize))
            }
            State::UntilClose if input.is_empty() => Ok(Step::NeedMore),
            State::UntilClose => Ok(Step::Data(input.len())),
            State::Chunked(c) => {
                let step = c.step(input)?;
                if let Step::Done(_) = step {
                    self.state = State::Done;
                }
                Ok(step)
            }
        }
    }

    /// The peer closed (or half-closed) its side: a body to the close is complete, any other
    /// not yet complete is cut short.
    pub fn end_of_stream(&mut self) -> Result<(), Refusal> {
        match self.state {
            State::UntilClose | State::Done | State::Left(0) => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(Refusal::Incomplete),
        }
    }

    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_head: 16 * 1024, max_fields: 100 };

    /// Steps over a whole body; returns its payload and the bytes it took, or the refusal.
    pub(crate) fn read(framing: Framing, input: &[u8]) -> Result<(Vec<u8>, usize), Refusal> {
        let mut r = BodyReader::new(framing, &LIMITS);
        let (mut data, mut at) = (Vec::new(), 0);
        loop {
            match r.step(&input[at..])? {
                Step::Data(n) => {
                    data.extend_from_slice(&input[at..at + n]);
                    at += n;
                }
                Step::Framing(n) => at += n,
                Step::Done(n) => return Ok((data, at + n)),
                Step::NeedMore => {
                    r.end_of_stream()?;
                    return Ok((data, at));
                }
            }
        }
    }

    #[test]
    fn a_length_body_ends_at_its_length() {
        assert_eq!(read(Framing::Length(5), b"helloGET"), Ok((b"hello".to_vec(), 5)));
        assert_eq!(read(Framing::Empty, b"GET"), Ok((vec![], 0)));
        assert_eq!(read(Framing::Length(5), b"hel"), Err(Refusal::Incomplete));
    }

    #[test]
    fn a_body_to_the_close_takes_everything() {
        assert_eq!(read(Framing::UntilClose, b"all of it"), Ok((b"all of it".to_vec(), 9)));
    }

    #[test]
    fn a_chunked_body_ends_after_its_trailers() {
        let s = b"5;x=1\r\nhello\r\n1\r\n!\r\n0\r\nT: 1\r\n\r\nGET";
        assert_eq!(read(Framing::Chunked, s), Ok((b"hello!".to_vec(), s.len() - 3)));
        assert_eq!(read(Framing::Chunked, b"5\r\nhel"), Err(Refusal::Incomplete));
    }

    #[test]
    fn a_response_with_no_body_is_empty_whatever_its_fields_say() {
        for (status, to_head) in [(100, false), (101, false), (204, false), (304, false), (200, true)] {
            assert_eq!(Framing::of_response(status, to_head, Some(5), None), Framing::Empty, "{status}");
        }
        assert_eq!(Framing::of_response(200, false, Some(5), None), Framing::Length(5));
    }
}
