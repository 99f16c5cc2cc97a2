//! Decodes CPython line tables (3.9 `co_lnotab`, 3.10 `co_linetable`, 3.11+ PEP 657 location table) into source line numbers; pure, no I/O.
//!
//! Every lookup mirrors what CPython's own `PyCode_Addr2Line` returns for
//! `frame.f_lineno`:
//!
//! * the instruction offset (`lasti`) is in 2-byte code units from the start
//!   of the bytecode on every version (the sampler normalises 3.9's byte
//!   `f_lasti`); internally the tables are walked in bytes, as CPython does;
//! * a negative `lasti` (a frame that was just pushed has -1) yields
//!   `co_firstlineno` on every version (3.10+ special-case `addrq < 0`; 3.9's
//!   loop breaks on the first pair);
//! * on 3.10+ an offset past the last entry has no line (`None`); on 3.9 it
//!   gets the line reached after the last pair;
//! * a computed line below zero is reported as `None` (CPython's `-1`).
//!
//! Corrupt or truncated tables never panic: decoding stops at the end of the
//! bytes and returns what it has (best effort).

/// Line-table encoding used by a CPython minor version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineTableFormat {
    /// 3.9 `co_lnotab`: `(addr_incr u8 bytes, line_incr i8)` pairs.
    Lnotab39,
    /// 3.10 `co_linetable` (PEP 626): `(byte_delta u8, line_delta i8)`
    /// pairs; a line delta of -128 means "no line" while the address still
    /// advances.
    Linetable310,
    /// 3.11+ location table (PEP 657, `Objects/locations.md`).
    Locations311,
}

impl LineTableFormat {
    /// The format for CPython `major.minor`, as its layout (`mlprof_pyframes::layouts`)
    /// carries it; for a minor newer than any known, the newest's (its frames are walked only
    /// after the self-check of a layout read from the interpreter). `None` for anything older
    /// or another major.
    pub fn for_version(major: u8, minor: u8) -> Option<Self> {
        use mlprof_pyframes::layouts::{self, LineTable};
        let newest = layouts::newest();
        let layout = match layouts::for_version(major, minor) {
            Some(l) => l,
            None if major == 3 && minor > newest.minor => newest,
            None => return None,
        };
        Some(match layout.line_table {
            LineTable::Lnotab39 => Self::Lnotab39,
            LineTable::Lnotab310 => Self::Linetable310,
            LineTable::Locations311 => Self::Locations311,
        })
    }
}

/// Line for instruction `lasti_units` (code units), or `None` when CPython
/// reports no line for it. Walks the table once; use [`LineIndex`] for
/// repeated lookups in the same code object.
pub fn line_for(
    format: LineTableFormat,
    table: &[u8],
    firstlineno: i32,
    lasti_units: i32,
) -> Option<u32> {
    if lasti_units < 0 {
        return to_line(firstlineno);
    }
    let addr = i64::from(lasti_units) * 2;
    Ranges::new(format, table, firstlineno)
        .find(|r| addr < r.end)
        .and_then(|r| to_line(r.line))
}

/// A code object's line table decoded into sorted address ranges, for
/// binary-searched lookups. Gives the same answers as [`line_for`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineIndex {
    firstlineno: i32,
    /// Exclusive end byte address of each range; ranges are contiguous from
    /// address 0, so range `i` starts at `ends[i - 1]` (or 0).
    ends: Vec<i64>,
    /// Line of each range; negative means no line.
    lines: Vec<i32>,
}

impl LineIndex {
    /// Decodes `table` once. Adjacent ranges with the same line are merged.
    pub fn new(format: LineTableFormat, table: &[u8], firstlineno: i32) -> Self {
        let mut ends: Vec<i64> = Vec::new();
        let mut lines: Vec<i32> = Vec::new();
        for r in Ranges::new(format, table, firstlineno) {
            let line = if r.line < 0 { -1 } else { r.line };
            match (lines.last(), ends.last_mut()) {
                (Some(&last), Some(end)) if last == line => *end = r.end,
                _ => {
                    ends.push(r.end);
                    lines.push(line);
                }
            }
        }
        Self {
            firstlineno,
            ends,
            lines,
        }
    }

    /// Line for instruction `lasti_units` (code units); see [`line_for`].
    pub fn line(&self, lasti_units: i32) -> Option<u32> {
        if lasti_units < 0 {
            return to_line(self.firstlineno);
        }
        let addr = i64::from(lasti_units) * 2;
        let idx = self.ends.partition_point(|&end| end <= addr);
        self.lines.get(idx).copied().and_then(to_line)
    }
}

/// CPython's line numbers are `int`s with -1 (any negative) meaning none.
fn to_line(line: i32) -> Option<u32> {
    u32::try_from(line).ok()
}

/// One decoded address range. It starts where the previous one ended (the
/// first at 0) and runs to `end` (bytes, exclusive); `line < 0` = no line.
#[derive(Clone, Copy, Debug)]
struct Range {
    end: i64,
    line: i32,
}

/// Iterator over the non-empty address ranges of a line table, in address
/// order, mirroring CPython's `PyLineTable_NextAddressRange` (3.10+) and the
/// `PyCode_Addr2Line` loop (3.9).
struct Ranges<'a> {
    format: LineTableFormat,
    table: &'a [u8],
    pos: usize,
    addr: i64,
    line: i32,
    done: bool,
}

impl<'a> Ranges<'a> {
    fn new(format: LineTableFormat, table: &'a [u8], firstlineno: i32) -> Self {
        Self {
            format,
            table,
            pos: 0,
            addr: 0,
            line: firstlineno,
            done: false,
        }
    }

    /// The next two table bytes as `(unsigned, signed)`, advancing past them.
    fn next_pair(&mut self) -> Option<(u8, i8)> {
        let end = self.pos.checked_add(2)?;
        let pair = self.table.get(self.pos..end)?;
        self.pos = end;
        match *pair {
            [a, l] => Some((a, i8::from_le_bytes([l]))),
            _ => None,
        }
    }

    /// 3.9: the line in force at address `q` is firstlineno plus every line
    /// increment whose cumulative address is `<= q`. After the last pair the
    /// final line covers every higher address.
    fn next_lnotab(&mut self) -> Option<Range> {
        while !self.done {
            let Some((a, l)) = self.next_pair() else {
                self.done = true;
                return Some(Range {
                    end: i64::MAX,
                    line: self.line,
                });
            };
            let start = self.addr;
            let line = self.line;
            self.addr = self.addr.saturating_add(i64::from(a));
            self.line = self.line.wrapping_add(i32::from(l));
            if self.addr > start {
                return Some(Range {
                    end: self.addr,
                    line,
                });
            }
        }
        None
    }

    /// 3.10: `end = start + delta` first; then -128 = no line (the computed
    /// line is unchanged), else the line moves by the delta. Zero-length
    /// entries only move the line.
    fn next_linetable(&mut self) -> Option<Range> {
        loop {
            let (a, l) = self.next_pair()?;
            let start = self.addr;
            self.addr = self.addr.saturating_add(i64::from(a));
            let line = if l == -128 {
                -1
            } else {
                self.line = self.line.wrapping_add(i32::from(l));
                self.line
            };
            if self.addr > start {
                return Some(Range {
                    end: self.addr,
                    line,
                });
            }
        }
    }

    /// 3.11+: one entry per call, as CPython's `advance()`: the line delta
    /// comes from the entry's code, the length from its low 3 bits, and the
    /// next entry starts at the next byte with bit 7 set.
    fn next_location(&mut self) -> Option<Range> {
        let first = *self.table.get(self.pos)?;
        let code = (first >> 3) & 15;
        let delta = match code {
            13 | 14 => read_signed_varint(self.table, self.pos.saturating_add(1)),
            10..=12 => i32::from(code) - 10,
            _ => 0, // short forms (same line) and 15 (NONE)
        };
        self.line = self.line.wrapping_add(delta);
        let line = if first >> 3 == 0x1f { -1 } else { self.line };
        self.addr = self.addr.saturating_add((i64::from(first & 7) + 1) * 2);
        self.pos = self.pos.saturating_add(1);
        while self.table.get(self.pos).is_some_and(|b| b & 0x80 == 0) {
            self.pos = self.pos.saturating_add(1);
        }
        Some(Range {
            end: self.addr,
            line,
        })
    }
}

impl Iterator for Ranges<'_> {
    type Item = Range;

    fn next(&mut self) -> Option<Range> {
        match self.format {
            LineTableFormat::Lnotab39 => self.next_lnotab(),
            LineTableFormat::Linetable310 => self.next_linetable(),
            LineTableFormat::Locations311 => self.next_location(),
        }
    }
}

/// Unsigned varint at `pos`: 6-bit chunks, least significant first, bit 6 =
/// more follows. Stops at the end of the table (CPython would read past it);
/// bits beyond 32 are dropped.
fn read_varint(table: &[u8], mut pos: usize) -> u32 {
    let Some(&first) = table.get(pos) else {
        return 0;
    };
    let mut read = first;
    let mut val = u32::from(read & 63);
    let mut shift: u32 = 0;
    while read & 64 != 0 {
        pos = pos.saturating_add(1);
        let Some(&b) = table.get(pos) else { break };
        read = b;
        shift = shift.saturating_add(6);
        val |= u32::from(read & 63).checked_shl(shift).unwrap_or(0);
    }
    val
}

/// Signed varint: the low bit is the sign, the rest the magnitude.
fn read_signed_varint(table: &[u8], pos: usize) -> i32 {
    let uval = read_varint(table, pos);
    // uval >> 1 <= i32::MAX, so neither conversion nor negation can fail.
    let mag = i32::try_from(uval >> 1).unwrap_or(i32::MAX);
    if uval & 1 != 0 {
        -mag
    } else {
        mag
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LineTableFormat::{Linetable310, Lnotab39, Locations311};

    /// Checks `line_for` and `LineIndex` agree with `want` at every unit.
    fn check(format: LineTableFormat, table: &[u8], first: i32, want: &[(i32, Option<u32>)]) {
        let index = LineIndex::new(format, table, first);
        for &(unit, line) in want {
            assert_eq!(
                line_for(format, table, first, unit),
                line,
                "line_for {format:?} unit {unit}"
            );
            assert_eq!(index.line(unit), line, "LineIndex {format:?} unit {unit}");
        }
    }

    #[test]
    fn for_version_maps_minor_versions() {
        assert_eq!(LineTableFormat::for_version(3, 9), Some(Lnotab39));
        assert_eq!(LineTableFormat::for_version(3, 10), Some(Linetable310));
        for minor in 11..=14 {
            assert_eq!(LineTableFormat::for_version(3, minor), Some(Locations311));
        }
        assert_eq!(LineTableFormat::for_version(3, 8), None);
        assert_eq!(LineTableFormat::for_version(3, 15), Some(Locations311));
        assert_eq!(LineTableFormat::for_version(3, 16), Some(Locations311));
        assert_eq!(LineTableFormat::for_version(2, 7), None);
    }

    /// Expected values were confirmed with `PyCode_Addr2Line` on 3.9.18.
    #[test]
    fn lnotab39_multi_pair_jumps() {
        // (6,+1); address +300 as (255,0),(45,+3); line +300 as
        // (4,+127),(0,+127),(0,+46); then (2,-3).
        let t = [6, 1, 255, 0, 45, 3, 4, 127, 0, 127, 0, 46, 2, 0xfd];
        let s = Some;
        let want = [
            (-1, s(10)),
            (0, s(10)),
            (2, s(10)),
            (3, s(11)),
            (152, s(11)),
            (153, s(14)),
            (154, s(14)),
            (155, s(314)),
            (156, s(311)),
            (1000, s(311)),
        ];
        check(Lnotab39, &t, 10, &want);
        // Empty table: every offset is on firstlineno; odd trailing byte ignored.
        check(Lnotab39, &[], 7, &[(0, s(7)), (50, s(7))]);
        check(Lnotab39, &[2, 1, 9], 7, &[(0, s(7)), (1, s(8)), (9, s(8))]);
    }

    /// Expected values were confirmed with `co_lines()` on 3.10.13.
    #[test]
    fn linetable310_minus_128_still_advances() {
        // (6,+1) (4,-128: no line) (0,+5: zero length) (2,+1) (254,0) (2,-2)
        let t = [6, 1, 4, 0x80, 0, 5, 2, 1, 254, 0, 2, 0xfe];
        let s = Some;
        let want = [
            (-1, s(10)),
            (0, s(11)),
            (2, s(11)),
            (3, None),
            (4, None),
            (5, s(17)),
            (6, s(17)),
            (132, s(17)),
            (133, s(15)),
            (134, None),
            (i32::MAX, None),
        ];
        check(Linetable310, &t, 10, &want);
        check(Linetable310, &[], 3, &[(-1, s(3)), (0, None)]);
    }

    /// Expected values were confirmed with `co_lines()` / `PyCode_Addr2Line`
    /// on 3.11.7, 3.12.1 and 3.13.0.
    #[test]
    fn locations311_all_entry_kinds() {
        let t = [
            0x81, 0x00, // SHORT code 0, 2 units, same line
            0xd8, 0x04, 0x08, // ONE_LINE1, 1 unit, +1
            0xf8, // NONE, 1 unit
            0xea, 0x07, // NO_COLUMNS, 3 units, svarint 7 = -3
            0xf1, 0x49, 0x03, 0x00, 0x05, 0x0a, // LONG, 2 units, svarint 201 = -100
            0xf0, 0x58, 0x09, 0x00, 0x41, 0x01, 0x02, // LONG, 1 unit, +300, 2-byte column
            0xe0, 0x01, 0x02, // ONE_LINE2, 1 unit, +2
        ];
        let s = Some;
        let want = [
            (-1, s(200)),
            (0, s(200)),
            (1, s(200)),
            (2, s(201)),
            (3, None),
            (4, s(198)),
            (6, s(198)),
            (7, s(98)),
            (8, s(98)),
            (9, s(398)),
            (10, s(400)),
            (11, None),
        ];
        check(Locations311, &t, 200, &want);
        check(Locations311, &[], 5, &[(-1, s(5)), (0, None)]);
    }

    #[test]
    fn negative_lasti_is_firstlineno_and_negative_lines_are_none() {
        for format in [Lnotab39, Linetable310, Locations311] {
            assert_eq!(line_for(format, &[0x81, 0], 42, i32::MIN), Some(42));
            assert_eq!(line_for(format, &[], -1, -1), None);
            assert_eq!(LineIndex::new(format, &[], -5).line(-1), None);
        }
        // A line that goes below zero has no line, like CPython's -1.
        check(Linetable310, &[2, 0xfe], 1, &[(0, None), (1, None)]);
    }

    #[test]
    fn truncated_varints_do_not_panic() {
        for t in [
            &[0xf0u8][..],
            &[0xf0, 0x40],
            &[0xe8, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f],
        ] {
            let _ = line_for(Locations311, t, 1, 0);
            let _ = LineIndex::new(Locations311, t, 1).line(0);
        }
        assert_eq!(line_for(Locations311, &[0xe8, 0x40], 1, 0), Some(1));
    }

    #[test]
    fn random_bytes_never_panic_and_index_agrees() {
        let mut rng = crate::test_rng::Rng::new(0x9e37_79b9_7f4a_7c15);
        let formats = [Lnotab39, Linetable310, Locations311];
        for _ in 0..3000 {
            let len = (rng.next()
                % if rng.next().is_multiple_of(16) {
                    4096
                } else {
                    64
                }) as usize;
            let table: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let first = match rng.next() % 4 {
                0 => i32::MAX,
                1 => i32::MIN,
                _ => (rng.next() % 1000) as i32 - 10,
            };
            let format = formats[(rng.next() % 3) as usize];
            let index = LineIndex::new(format, &table, first);
            let probes = [-1, 0, 1, 7, 100, 5000, i32::MAX, i32::MIN];
            for lasti in probes
                .into_iter()
                .chain((0..8).map(|_| (rng.next() % 300) as i32))
            {
                assert_eq!(
                    line_for(format, &table, first, lasti),
                    index.line(lasti),
                    "{format:?} {table:x?} {first} {lasti}"
                );
            }
        }
    }

    /// Mutations of real tables (byte flips, insertions, deletions, repeats) up to the
    /// largest table a channel may carry: never a panic, and both lookups agree.
    #[test]
    fn mutated_tables_never_panic_and_index_agrees() {
        let seeds: [&[u8]; 3] = [
            &[6, 1, 255, 0, 45, 3, 4, 127, 0, 127, 0, 46, 2, 0xfd],
            &[6, 1, 4, 0x80, 0, 5, 2, 1, 254, 0, 2, 0xfe],
            &[
                0x81, 0x00, 0xd8, 0x04, 0x08, 0xf8, 0xea, 0x07, 0xf1, 0x49, 0x03, 0x00, 0x05, 0x0a,
                0xf0, 0x58, 0x09, 0x00, 0x41, 0x01, 0x02, 0xe0, 0x01, 0x02,
            ],
        ];
        let formats = [Lnotab39, Linetable310, Locations311];
        let mut rng = crate::test_rng::Rng::new(0x2545_f491_4f6c_dd1d);
        for case in 0..2000u64 {
            let mut table = seeds[(case % 3) as usize].to_vec();
            for _ in 0..1 + rng.next() % 6 {
                let at = (rng.next() % (table.len() as u64 + 1)) as usize;
                match rng.next() % 4 {
                    0 if at < table.len() => table[at] = rng.next() as u8,
                    1 => table.insert(at, rng.next() as u8),
                    2 if at < table.len() => {
                        table.remove(at);
                    }
                    _ => {
                        // Repeat a piece many times: long tables, long varints, big jumps.
                        let end = (at + 1 + (rng.next() % 8) as usize).min(table.len());
                        let piece = table[at.min(end)..end].to_vec();
                        for _ in 0..rng.next() % 64 {
                            table.extend_from_slice(&piece);
                        }
                    }
                }
            }
            if case % 100 == 0 {
                // The longest a channel may carry.
                table.resize(mlprof_wire::MAX_BLOB_BYTES, rng.next() as u8);
            }
            let first = [1, 0, -1, i32::MAX, i32::MIN][(rng.next() % 5) as usize];
            let format = formats[(case % 3) as usize];
            let index = LineIndex::new(format, &table, first);
            for lasti in [-1, 0, 3, 100, 20_000, i32::MAX, i32::MIN, rng.next() as i32] {
                assert_eq!(
                    line_for(format, &table, first, lasti),
                    index.line(lasti),
                    "case {case}: {format:?} {first} {lasti}"
                );
            }
        }
    }
}
