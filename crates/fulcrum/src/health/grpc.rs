//! `kind = "grpc"`: the gRPC health protocol (grpc.health.v1, `Health/Check`), the check that
//! gRPC servers and their clients' load balancers use. The request and the answer are one
//! protobuf field each, written and read here rather than through a generated client.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};

use super::CheckError;
use super::target::Target;

const METHOD: &str = "/grpc.health.v1.Health/Check";

/// Largest answer read: a HealthCheckResponse is a few bytes.
const MAX_ANSWER: usize = 64 * 1024;

/// The `Check` call asking about `service` (empty: the server as a whole).
pub fn request(target: &Target<'_>, service: &str) -> Result<hyper::Request<Full<Bytes>>, CheckError> {
    hyper::Request::post(format!("{}://{}{METHOD}", target.scheme(), target.address()))
        .header(hyper::header::CONTENT_TYPE, "application/grpc")
        .header(hyper::header::TE, "trailers")
        .header(hyper::header::USER_AGENT, "fulcrum-health")
        .body(Full::new(frame(service)))
        .map_err(CheckError::BadRequest)
}

/// Passes when the call ends with grpc-status 0 and the answer says SERVING.
pub async fn verdict(resp: hyper::Response<hyper::body::Incoming>) -> Result<String, CheckError> {
    let status = resp.status().as_u16();
    if status != 200 {
        return Err(CheckError::Status { request: format!("POST {METHOD}"), status, expected: 200 });
    }
    // A call that fails at once ends in its headers ("trailers-only").
    if let Some(e) = failed_call(resp.headers()) {
        return Err(e);
    }
    let collected = Limited::new(resp.into_body(), MAX_ANSWER).collect().await.map_err(CheckError::Body)?;
    let Some(trailers) = collected.trailers().filter(|t| t.contains_key("grpc-status")) else {
        return Err(CheckError::Grpc("the call ended without grpc-status".into()));
    };
    if let Some(e) = failed_call(trailers) {
        return Err(e);
    }
    match serving_status(&collected.to_bytes()).map_err(|e| CheckError::Grpc(e.into()))? {
        1 => Ok("gRPC health SERVING".into()),
        other => Err(CheckError::Grpc(format!("health status {}", status_name(other)))),
    }
}

/// The error of a call whose grpc-status is there and not 0 (OK).
fn failed_call(headers: &hyper::HeaderMap) -> Option<CheckError> {
    let code = headers.get("grpc-status")?;
    if code == "0" {
        return None;
    }
    let message = headers.get("grpc-message").map(|m| String::from_utf8_lossy(m.as_bytes()).chars().take(120).collect::<String>()).unwrap_or_default();
    Some(CheckError::Grpc(format!("grpc-status {} {message}", String::from_utf8_lossy(code.as_bytes()).chars().take(8).collect::<String>()).trim_end().to_string()))
}

fn status_name(status: u64) -> String {
    match status {
        0 => "UNKNOWN".into(),
        1 => "SERVING".into(),
        2 => "NOT_SERVING".into(),
        3 => "SERVICE_UNKNOWN".into(),
        n => n.to_string(),
    }
}

/// A gRPC message frame (uncompressed) holding HealthCheckRequest { service }.
pub fn frame(service: &str) -> Bytes {
    let mut message = Vec::with_capacity(service.len() + 3);
    if !service.is_empty() {
        message.push(0x0a); // field 1, length-delimited
        let mut len = service.len();
        while len >= 0x80 {
            message.push((len as u8) | 0x80);
            len >>= 7;
        }
        message.push(len as u8);
        message.extend_from_slice(service.as_bytes());
    }
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(&message);
    out.into()
}

/// HealthCheckResponse.status (field 1) from the first message frame of an answer's body; 0
/// (UNKNOWN) when the field is absent, as protobuf's default.
pub fn serving_status(body: &[u8]) -> Result<u64, &'static str> {
    let [compressed, a, b, c, d, rest @ ..] = body else { return Err("the answer holds no message") };
    if *compressed != 0 {
        return Err("the answer is compressed, which the check did not ask for");
    }
    let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
    let Some(mut message) = rest.get(..len) else { return Err("the answer's message is cut short") };
    let mut status = 0;
    while !message.is_empty() {
        let key = varint(&mut message)?;
        let skip = match key & 7 {
            0 => {
                let value = varint(&mut message)?;
                if key >> 3 == 1 {
                    status = value;
                }
                0
            }
            1 => 8,
            2 => usize::try_from(varint(&mut message)?).map_err(|_| "a field longer than the message")?,
            5 => 4,
            _ => return Err("the answer is not a HealthCheckResponse"),
        };
        message = message.get(skip..).ok_or("a field longer than the message")?;
    }
    Ok(status)
}

/// A protobuf varint, at most 10 bytes.
fn varint(buf: &mut &[u8]) -> Result<u64, &'static str> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&byte, rest) = buf.split_first().ok_or("a number cut short")?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("a number longer than 10 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_one_frame_with_the_service_name() {
        assert_eq!(&frame("")[..], &[0, 0, 0, 0, 0]);
        assert_eq!(&frame("a.B")[..], &[0, 0, 0, 0, 5, 0x0a, 3, b'a', b'.', b'B']);
        let long = "x".repeat(200);
        let f = frame(&long);
        assert_eq!(&f[5..8], &[0x0a, 0xc8, 0x01], "a length of 200 is a two-byte varint");
        assert_eq!(f.len(), 5 + 3 + 200);
    }

    #[test]
    fn the_answer_status_is_read_past_other_fields() {
        assert_eq!(serving_status(&[0, 0, 0, 0, 2, 0x08, 1]), Ok(1));
        assert_eq!(serving_status(&[0, 0, 0, 0, 2, 0x08, 2]), Ok(2));
        assert_eq!(serving_status(&[0, 0, 0, 0, 0]), Ok(0), "an absent field is UNKNOWN");
        // An unknown length-delimited field and a fixed32 before the status.
        assert_eq!(serving_status(&[0, 0, 0, 0, 11, 0x12, 2, b'h', b'i', 0x1d, 1, 2, 3, 4, 0x08, 1]), Ok(1));
    }

    #[test]
    fn a_malformed_answer_is_an_error_not_a_panic() {
        for body in [
            &[][..],
            &[1, 0, 0, 0, 2, 0x08, 1],
            &[0, 0, 0, 0, 9, 0x08],
            &[0, 0, 0, 0, 1, 0x08],
            &[0, 0, 0, 0, 2, 0x12, 9],
            &[0, 0, 0, 0, 1, 0x0b],
            &[0, 0, 0, 0, 11, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ] {
            assert!(serving_status(body).is_err(), "{body:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_give_a_status_or_an_error(body in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let _ = serving_status(&body);
        }
    }
}
