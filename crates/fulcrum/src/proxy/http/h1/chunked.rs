//! The chunked transfer coding (RFC 9112 section 7.1), read as a stream: each step over the
//! bytes at hand says how many are payload and how many framing, so a forwarder copies a checked
//! chunked body on unchanged and a decoder keeps only the payload.
//!
//! What is checked is what the framing guard and hyper check together on the path through
//! hyper: a size line is 1 to 15 hex digits (no sign, no `0x`, no leading space; 15 keeps the
//! size within `u64`), optional spaces or tabs, then an optional extension, ended by CRLF; chunk
//! data is followed by CRLF; trailer fields are `name: value` lines with no folding. Bounds: a
//! size line is at most 1,024 bytes (the guard's), the extensions of one body at most 16 KiB
//! (hyper's), trailers at most `max_head` bytes and `max_fields` fields (hyper's bounds are the
//! same settings).

use super::body::Step;
use super::{Bad, Limits, Refusal};

/// A chunk-size line's longest text (the guard's bound).
const MAX_SIZE_LINE: usize = 1024;
/// The extension bytes of one body together (hyper's bound).
const MAX_EXTENSIONS: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Size,
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    Trailers,
}

/// A chunked body being read.
#[derive(Debug)]
pub struct Chunked {
    at: At,
    extensions: usize,
    trailer_bytes: usize,
    trailer_fields: usize,
    limits: Limits,
}

impl Chunked {
    pub fn new(limits: &Limits) -> Chunked {
        Chunked { at: At::Size, extensions: 0, trailer_bytes: 0, trailer_fields: 0, limits: *limits }
    }

    /// Decides about the front of `input`. After `Step::Done` the body is over and the
    /// reader is not to be stepped again.
    pub fn step(&mut self, input: &[u8]) -> Result<Step, Refusal> {
        match self.at {
            At::Size => {
                let Some((text, len)) = line(input, MAX_SIZE_LINE)? else { return Ok(Step::NeedMore) };
                let (size, extension) = size_line(text).ok_or_else(|| Refusal::Framing(Bad::BadChunkSize { line: String::from_utf8_lossy(text).into() }))?;
                self.extensions += extension;
                if self.extensions >= MAX_EXTENSIONS {
                    return Err(Refusal::ExtensionsTooLong(MAX_EXTENSIONS));
                }
                self.at = if size == 0 { At::Trailers } else { At::Data(size) };
                Ok(Step::Framing(len))
            }
            At::Data(_) if input.is_empty() => Ok(Step::NeedMore),
            At::Data(n) => {
                let take = n.min(input.len() as u64);
                self.at = if take == n { At::DataEnd } else { At::Data(n - take) };
                Ok(Step::Data(take as usize))
            }
            At::DataEnd => match input {
                [] | [b'\r'] => Ok(Step::NeedMore),
                [b'\r', b'\n', ..] => {
                    self.at = At::Size;
                    Ok(Step::Framing(2))
                }
                _ => Err(Refusal::Framing(Bad::ChunkNotEnded)),
            },
            At::Trailers => {
                let Some((text, len)) = line(input, self.limits.max_head)? else { return Ok(Step::NeedMore) };
                if text.is_empty() {
                    // hyper counts the blank line in its bound once there are trailers.
                    if self.trailer_fields > 0 {
                        self.count(2)?;
                    }
                    return Ok(Step::Done(len));
                }
                if text[0] == b' ' || text[0] == b'\t' {
                    return Err(Refusal::Framing(Bad::TrailerFolding));
                }
                if !field(text) {
                    return Err(Refusal::BadTrailer);
                }
                self.trailer_fields += 1;
                if self.trailer_fields > self.limits.max_fields {
                    return Err(Refusal::TooManyTrailers(self.limits.max_fields));
                }
                self.count(len)?;
                Ok(Step::Framing(len))
            }
        }
    }

    fn count(&mut self, bytes: usize) -> Result<(), Refusal> {
        self.trailer_bytes += bytes;
        if self.trailer_bytes >= self.limits.max_head {
            return Err(Refusal::TrailersTooLarge(self.limits.max_head));
        }
        Ok(())
    }
}

/// One CRLF-ended line at the front of `data` whose text is at most `max` bytes: its text and
/// its length with the CRLF. Where the input is cut never changes the verdict: a line is too long
/// when its text passes `max`, found whole or not.
fn line(data: &[u8], max: usize) -> Result<Option<(&[u8], usize)>, Refusal> {
    let window = &data[..data.len().min(max + 2)];
    match window.iter().position(|&b| b == b'\n') {
        Some(i) if i > 0 && data[i - 1] == b'\r' => {
            let text = &data[..i - 1];
            if text.contains(&b'\r') { Err(Refusal::Framing(Bad::BareCr)) } else { Ok(Some((text, i + 1))) }
        }
        Some(_) => Err(Refusal::Framing(Bad::BareLf)),
        None if data.len() >= max + 2 => Err(Refusal::Framing(Bad::LineTooLong)),
        None => Ok(None),
    }
}

/// A chunk-size line's size and the length of its extension (after `;`), if it is valid.
fn size_line(text: &[u8]) -> Option<(u64, usize)> {
    let digits = text.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 15 {
        return None;
    }
    let rest = &text[digits..];
    let spaces = rest.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    let extension = match &rest[spaces..] {
        [] => 0,
        [b';', ext @ ..] => ext.len(),
        _ => return None,
    };
    let size = text[..digits].iter().fold(0u64, |n, &b| n * 16 + u64::from((b as char).to_digit(16).unwrap_or(0)));
    Some((size, extension))
}

/// A trailer field line as httparse (and so hyper) takes one: a token, a colon, a value of
/// visible bytes, spaces, tabs and obs-text.
fn field(text: &[u8]) -> bool {
    let Some(colon) = text.iter().position(|&b| b == b':') else { return false };
    let (name, value) = (&text[..colon], &text[colon + 1..]);
    !name.is_empty() && name.iter().all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) && value.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_head: 256, max_fields: 4 };

    /// Steps over `input` handed over `piece` bytes at a time; returns the payload, the bytes
    /// the body took, or the refusal.
    fn decode(input: &[u8], piece: usize) -> Result<(Vec<u8>, usize), Refusal> {
        let mut c = Chunked::new(&LIMITS);
        let (mut data, mut at, mut seen) = (Vec::new(), 0, piece.min(input.len()));
        loop {
            match c.step(&input[at..seen])? {
                Step::Data(n) => {
                    data.extend_from_slice(&input[at..at + n]);
                    at += n;
                }
                Step::Framing(n) => at += n,
                Step::Done(n) => return Ok((data, at + n)),
                Step::NeedMore if seen == input.len() => return Err(Refusal::Incomplete),
                Step::NeedMore => seen = (seen + piece).min(input.len()),
            }
        }
    }

    fn whole(input: &[u8]) -> Result<(Vec<u8>, usize), Refusal> {
        decode(input, input.len())
    }

    #[test]
    fn chunks_decode_the_same_whole_or_a_byte_at_a_time() {
        let s = b"5\r\nhello\r\nA ; name=\"v\"\r\n0123456789\r\n0\r\nX-Sum: 1\r\nY: two words\r\n\r\nNEXT";
        let want = Ok((b"hello0123456789".to_vec(), s.len() - 4));
        for piece in [1, 2, 3, 7, s.len()] {
            assert_eq!(decode(s, piece), want, "pieces of {piece}");
        }
    }

    #[test]
    fn bad_size_lines_are_refused() {
        for line in ["g", "0x5", "-1", "", " 5", "5 5", "1000000000000000", "5;a\rb"] {
            let s = format!("{line}\r\nhello\r\n0\r\n\r\n");
            assert!(whole(s.as_bytes()).is_err(), "{line:?}");
        }
        assert_eq!(whole(b"00000000000005\r\nhello\r\n0\r\n\r\n").unwrap().0, b"hello");
        assert_eq!(whole(b"5\nhello\r\n0\r\n\r\n"), Err(Refusal::Framing(Bad::BareLf)));
    }

    #[test]
    fn chunk_data_must_end_in_crlf() {
        assert_eq!(whole(b"3\r\nhello\r\n0\r\n\r\n"), Err(Refusal::Framing(Bad::ChunkNotEnded)));
        assert_eq!(whole(b"5\r\nhello\r0\r\n\r\n"), Err(Refusal::Framing(Bad::ChunkNotEnded)));
        assert_eq!(decode(b"5\r\nhello\r", 100), Err(Refusal::Incomplete));
    }

    #[test]
    fn extensions_and_trailers_are_bounded() {
        let long = format!("1;{}\r\na\r\n0\r\n\r\n", "x".repeat(MAX_SIZE_LINE));
        assert_eq!(whole(long.as_bytes()), Err(Refusal::Framing(Bad::LineTooLong)));
        assert_eq!(decode(long.as_bytes(), 5), Err(Refusal::Framing(Bad::LineTooLong)));
        let many: String = (0..20).map(|_| format!("1;{}\r\na\r\n", "x".repeat(1000))).collect();
        assert_eq!(whole(format!("{many}0\r\n\r\n").as_bytes()), Err(Refusal::ExtensionsTooLong(MAX_EXTENSIONS)));
        let fields: String = (0..5).map(|i| format!("T{i}: v\r\n")).collect();
        assert_eq!(whole(format!("0\r\n{fields}\r\n").as_bytes()), Err(Refusal::TooManyTrailers(4)));
        let big = format!("0\r\nT: {}\r\nU: {}\r\n\r\n", "v".repeat(200), "v".repeat(200));
        assert_eq!(whole(big.as_bytes()), Err(Refusal::TrailersTooLarge(256)));
    }

    #[test]
    fn trailers_are_fields_without_folding() {
        assert_eq!(whole(b"0\r\nT: 1\r\n folded\r\n\r\n"), Err(Refusal::Framing(Bad::TrailerFolding)));
        assert_eq!(whole(b"0\r\nno colon\r\n\r\n"), Err(Refusal::BadTrailer));
        assert_eq!(whole(b"0\r\nT : 1\r\n\r\n"), Err(Refusal::BadTrailer));
        assert_eq!(whole(b"0\r\nT: a\x01b\r\n\r\n"), Err(Refusal::BadTrailer));
        assert_eq!(whole(b"0\r\nT:\r\n\r\n"), Ok((vec![], 9)));
    }

    proptest::proptest! {
        #[test]
        fn where_the_input_is_cut_changes_nothing(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), piece in 1usize..9) {
            proptest::prop_assert_eq!(decode(&data, piece), whole(&data));
        }
    }
}
