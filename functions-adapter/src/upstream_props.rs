//! Property tests of the reply reader over real loopback sockets: any well-formed reply, in
//! any framing and cut into any pieces, gives back its body intact; any bytes at all give an
//! answer or an error, never a panic, and never a body over the limit.

use proptest::prelude::*;
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};

use super::*;

#[derive(Debug, Clone)]
enum Frame {
    Length,
    /// Chunk sizes (cycled), with or without extensions and trailers.
    Chunked(Vec<usize>, bool),
    Close,
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        Just(Frame::Length),
        (prop::collection::vec(1usize..700, 1..5), any::<bool>())
            .prop_map(|(sizes, extras)| Frame::Chunked(sizes, extras)),
        Just(Frame::Close),
    ]
}

/// A reply with `body` in `frame`, an optional interim `100`, extra headers and a content type.
fn reply(
    body: &[u8],
    frame: &Frame,
    interim: bool,
    close: bool,
    extra: &[(String, String)],
) -> Vec<u8> {
    let mut r = Vec::new();
    if interim {
        r.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
    }
    r.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Type: text/x-test\r\n");
    for (name, value) in extra {
        r.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    if close {
        r.extend_from_slice(b"Connection: close\r\n");
    }
    match frame {
        Frame::Length => {
            r.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
        }
        Frame::Chunked(..) => r.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n"),
        Frame::Close => r.extend_from_slice(b"\r\n"),
    }
    match frame {
        Frame::Chunked(sizes, extras) => {
            let mut rest = body;
            for size in sizes.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (chunk, tail) = rest.split_at((*size).min(rest.len()));
                let ext = if *extras { ";a=b" } else { "" };
                r.extend_from_slice(format!("{:x}{ext}\r\n", chunk.len()).as_bytes());
                r.extend_from_slice(chunk);
                r.extend_from_slice(b"\r\n");
                rest = tail;
            }
            r.extend_from_slice(if *extras {
                b"0\r\nx-t: 1\r\n\r\n"
            } else {
                b"0\r\n\r\n"
            });
        }
        _ => r.extend_from_slice(body),
    }
    r
}

/// Reads one reply that a peer sends as `pieces` and then closes.
fn read(pieces: Vec<Vec<u8>>, max_reply: usize) -> Result<(Answer, bool), InvokeError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            for piece in pieces {
                if s.write_all(&piece).await.is_err() {
                    return;
                }
                tokio::task::yield_now().await;
            }
            let _ = s.shutdown().await;
        });
        let mut conn = Conn {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: BytesMut::new(),
            idle_since: Instant::now(),
        };
        let result = conn.read_reply(&Method::POST, max_reply).await;
        peer.await.unwrap();
        result
    })
}

/// `bytes` cut at the given points.
fn cut(bytes: &[u8], mut points: Vec<usize>) -> Vec<Vec<u8>> {
    points.iter_mut().for_each(|p| *p %= bytes.len() + 1);
    points.sort_unstable();
    let mut pieces = Vec::new();
    let mut start = 0;
    for p in points.into_iter().chain([bytes.len()]) {
        pieces.push(bytes[start..p].to_vec());
        start = p;
    }
    pieces
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_framing_in_any_pieces_gives_the_body_back(
        body in prop::collection::vec(any::<u8>(), 0..3000),
        frame in frame(),
        interim: bool,
        close: bool,
        extra in prop::collection::vec(("x-[a-z]{1,12}", "[ -~]{0,40}"), 0..6),
        points in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let raw = reply(&body, &frame, interim, close, &extra);
        let (answer, reusable) = read(cut(&raw, points), MAX_REPLY).unwrap();
        prop_assert_eq!(&answer.body[..], &body[..]);
        prop_assert_eq!(answer.status, StatusCode::OK);
        prop_assert_eq!(answer.content_type.unwrap(), "text/x-test");
        prop_assert_eq!(reusable, !close && !matches!(frame, Frame::Close));
    }

    #[test]
    fn any_bytes_give_an_answer_or_an_error_within_the_limit(
        raw in prop::collection::vec(any::<u8>(), 0..600),
        points in prop::collection::vec(any::<usize>(), 0..4),
    ) {
        if let Ok((answer, _)) = read(cut(&raw, points), 256) {
            prop_assert!(answer.body.len() <= 256);
        }
    }

    #[test]
    fn damaged_replies_give_an_answer_or_an_error_within_the_limit(
        body in prop::collection::vec(any::<u8>(), 0..600),
        frame in frame(),
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6),
    ) {
        let mut raw = reply(&body, &frame, false, false, &[]);
        for (at, byte) in flips {
            let n = raw.len();
            raw[at % n] = byte;
        }
        if let Ok((answer, _)) = read(vec![raw], 512) {
            prop_assert!(answer.body.len() <= 512);
        }
    }
}

const MAX_REPLY: usize = 1 << 20;
