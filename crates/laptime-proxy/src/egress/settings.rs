//! The upstream's limit of concurrent streams on an HTTP/2 connection, read from the frames it
//! sends. hyper keeps the peer's SETTINGS to itself and queues a request past the limit
//! without a word, so the wait would count as the upstream's time to answer; the lanes
//! ([`crate::lanes`]) need the limit to never send past it. Reading it takes only the 9-byte
//! frame headers (RFC 9113 section 4.1) and the payload of SETTINGS frames, so a DATA frame's
//! bytes are skipped by their count, never looked at. Written by hand: no crate reads frames
//! off a connection another library owns.

/// `SETTINGS_MAX_CONCURRENT_STREAMS` (RFC 9113 section 6.5.2).
const MAX_CONCURRENT_STREAMS: u16 = 0x3;
const SETTINGS: u8 = 0x4;
const ACK: u8 = 0x1;
const HEADER_LEN: usize = 9;
const ENTRY_LEN: usize = 6;

/// What the server's SETTINGS frames said, by the end of a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Said {
    /// The last `SETTINGS_MAX_CONCURRENT_STREAMS` they set; `None` when they left it as it was
    /// (a server that never sets it has no limit, RFC 9113 section 6.5.2).
    pub max_streams: Option<u32>,
}

/// Where the scan is in the server's frames.
#[derive(Debug, Default)]
pub struct FrameScan {
    head: [u8; HEADER_LEN],
    /// Bytes of `head` read so far.
    head_len: usize,
    /// Payload bytes of the current frame still to come.
    payload_left: usize,
    /// In a SETTINGS frame's payload: the entry read so far, and the limit it set so far.
    settings: Option<Settings>,
}

#[derive(Debug, Default)]
struct Settings {
    entry: [u8; ENTRY_LEN],
    len: usize,
    max_streams: Option<u32>,
}

impl FrameScan {
    /// Reads the next bytes the server sent; what the SETTINGS frames they complete said, if
    /// they complete any.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Option<Said> {
        let mut said: Option<Said> = None;
        while !bytes.is_empty() {
            if self.payload_left == 0 {
                let n = (HEADER_LEN - self.head_len).min(bytes.len());
                self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
                self.head_len += n;
                bytes = &bytes[n..];
                if self.head_len == HEADER_LEN {
                    self.head_len = 0;
                    self.begin_frame();
                    if self.payload_left == 0 {
                        // An empty SETTINGS frame says nothing new, but it is the server's
                        // word that it has said its settings.
                        if let Some(s) = self.settings.take() {
                            s.said(&mut said);
                        }
                    }
                }
                continue;
            }
            let n = self.payload_left.min(bytes.len());
            if let Some(s) = self.settings.as_mut() {
                s.read_entries(&bytes[..n]);
            }
            self.payload_left -= n;
            if self.payload_left == 0 {
                if let Some(s) = self.settings.take() {
                    s.said(&mut said);
                }
            }
            bytes = &bytes[n..];
        }
        said
    }

    fn begin_frame(&mut self) {
        let h = &self.head;
        self.payload_left = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        let settings = h[3] == SETTINGS && h[4] & ACK == 0 && stream == 0;
        self.settings = settings.then(Settings::default);
    }
}

impl Settings {
    /// The frame is whole: what it said, after what frames earlier in the read said.
    fn said(self, said: &mut Option<Said>) {
        let before = said.and_then(|d| d.max_streams);
        *said = Some(Said {
            max_streams: self.max_streams.or(before),
        });
    }

    /// Reads a SETTINGS payload's entries (16-bit identifier, 32-bit value).
    fn read_entries(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.entry[self.len] = b;
            self.len += 1;
            if self.len == ENTRY_LEN {
                self.len = 0;
                let e = &self.entry;
                if u16::from_be_bytes([e[0], e[1]]) == MAX_CONCURRENT_STREAMS {
                    self.max_streams = Some(u32::from_be_bytes([e[2], e[3], e[4], e[5]]));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len().to_be_bytes();
        let mut f = vec![len[5], len[6], len[7], kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn settings(entries: &[(u16, u32)]) -> Vec<u8> {
        let payload: Vec<u8> = entries
            .iter()
            .flat_map(|(id, v)| id.to_be_bytes().into_iter().chain(v.to_be_bytes()))
            .collect();
        frame(SETTINGS, 0, 0, &payload)
    }

    /// A server's opening: SETTINGS (window size, limit 250, frame size), a WINDOW_UPDATE, the
    /// ack of ours, a HEADERS and a DATA frame whose payload looks like a SETTINGS frame.
    fn opening() -> Vec<u8> {
        let mut bytes = settings(&[(0x4, 1 << 20), (0x3, 250), (0x5, 1 << 14)]);
        bytes.extend(frame(0x8, 0, 0, &[0, 0x0f, 0, 1]));
        bytes.extend(frame(SETTINGS, ACK, 0, &[]));
        bytes.extend(frame(0x1, 0x4, 1, &[0x88]));
        bytes.extend(frame(0x0, 0, 1, &settings(&[(0x3, 7)])));
        bytes
    }

    fn limit(n: u32) -> Option<Said> {
        Some(Said {
            max_streams: Some(n),
        })
    }

    #[test]
    fn the_limit_is_read_from_the_servers_settings_and_nothing_else() {
        let mut scan = FrameScan::default();
        assert_eq!(scan.feed(&opening()), limit(250));
        // A later SETTINGS changes it; one without the entry leaves it as it was.
        assert_eq!(scan.feed(&settings(&[(0x3, 64)])), limit(64));
        let unchanged = Some(Said { max_streams: None });
        assert_eq!(scan.feed(&settings(&[(0x4, 65_535)])), unchanged);
        assert_eq!(scan.feed(&frame(SETTINGS, 0, 0, &[])), unchanged, "empty");
        assert_eq!(scan.feed(&frame(0x0, 0, 3, &[0x3; 40])), None);
        // Two frames in one read: the limit the first set stays when the second leaves it.
        let mut two = settings(&[(0x3, 8)]);
        two.extend(settings(&[(0x4, 1)]));
        assert_eq!(scan.feed(&two), limit(8));
    }

    #[test]
    fn frames_split_at_every_byte_read_the_same() {
        let bytes = opening();
        for cut in 0..bytes.len() {
            let mut scan = FrameScan::default();
            let first = scan.feed(&bytes[..cut]);
            let second = scan.feed(&bytes[cut..]);
            assert_eq!(first.or(second), limit(250), "cut at {cut}");
        }
        let mut scan = FrameScan::default();
        let said: Vec<Said> = bytes.iter().filter_map(|b| scan.feed(&[*b])).collect();
        assert_eq!(said, [limit(250).unwrap()]);
    }

    #[test]
    fn settings_on_a_stream_or_acknowledged_are_not_the_servers() {
        let mut scan = FrameScan::default();
        let payload = [0, 3, 0, 0, 0, 9];
        assert_eq!(scan.feed(&frame(SETTINGS, ACK, 0, &payload)), None);
        assert_eq!(scan.feed(&frame(SETTINGS, 0, 1, &payload)), None);
        assert_eq!(scan.feed(&frame(SETTINGS, 0, 0, &payload)), limit(9));
    }
}
