//! Code objects → small ids. The first time a code object is seen in this channel, its file
//! name, qualified name, first line and line table are sent once ([`mlprof_wire::Kind::Code`] + data
//! records); later samples carry only the id. A lock-free open-addressing table, keyed by the
//! code object's address and checked against its fingerprint (first line, file-name and name
//! pointers) so that an address reused by a new code object gets a new id.
//! Runs inside signal handlers: no allocation, no locks.

use core::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};

use mlprof_wire::{Record, Ring, DATA_BYTES, UNKNOWN_CODE};

use mlprof_pyframes::code::{self, Blob};
use mlprof_pyframes::Memory;

use super::runtime::Runtime;
use crate::clock;

const SLOTS: usize = 1 << 16;
const PROBES: usize = 32;
/// Longest string or line table sent; longer ones are cut (a line table is then decoded as far
/// as it goes).
const MAX_BYTES: usize = 16 * 1024;

const EMPTY: u32 = 0;
const BUSY: u32 = 1;
const READY: u32 = 2;

struct Entry {
    key: AtomicUsize,
    state: AtomicU32,
    generation: AtomicU32,
    /// [`EPOCH`] when this entry was last sent: a fork child's new channel has not seen it.
    epoch: AtomicU32,
    firstlineno: AtomicI32,
    filename: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)] // used only as an array initialiser
const NEW: Entry = Entry {
    key: AtomicUsize::new(0),
    state: AtomicU32::new(EMPTY),
    generation: AtomicU32::new(0),
    epoch: AtomicU32::new(0),
    firstlineno: AtomicI32::new(0),
    filename: AtomicUsize::new(0),
};

static TABLE: [Entry; SLOTS] = [NEW; SLOTS];
/// Starts at 1 and only grows (0 marks an entry whose description was never sent).
static EPOCH: AtomicU32 = AtomicU32::new(1);

/// A new channel (fork child): every code object must be sent again.
pub fn new_epoch() {
    if EPOCH.fetch_add(1, Ordering::Relaxed).wrapping_add(1) == 0 {
        EPOCH.fetch_add(1, Ordering::Relaxed); // 0 is reserved
    }
}

/// The id of the code object at `code`, sending its description first if this channel has not
/// seen it. [`UNKNOWN_CODE`] if the table is full.
pub fn id(mem: &impl Memory, rt: &Runtime, ring: &Ring<'_>, code: usize) -> u32 {
    let start = (code >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48;
    for probe in 0..PROBES {
        let slot = (start + probe) & (SLOTS - 1);
        let Some(entry) = TABLE.get(slot) else {
            continue; // never: the mask keeps `slot` in the table
        };
        let key = entry.key.load(Ordering::Acquire);
        if key == 0
            && entry
                .key
                .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            && entry.key.load(Ordering::Acquire) != code
        {
            continue; // another thread took this slot for another code object
        }
        if key != 0 && key != code {
            continue;
        }
        return claim(mem, rt, ring, entry, slot, code, key == 0);
    }
    UNKNOWN_CODE
}

fn claim(
    mem: &impl Memory,
    rt: &Runtime,
    ring: &Ring<'_>,
    entry: &Entry,
    slot: usize,
    code: usize,
    fresh: bool,
) -> u32 {
    let (firstlineno, filename) = code::fingerprint(mem, rt.layout, code);
    let epoch = EPOCH.load(Ordering::Relaxed);
    // Ids stay below 2^31: the collector numbers code objects it reads itself from 2^31 up.
    let id_of = |e: &Entry| slot as u32 | (e.generation.load(Ordering::Relaxed) & 0x7fff) << 16;
    if !fresh {
        let state = entry.state.load(Ordering::Acquire);
        let same = entry.firstlineno.load(Ordering::Relaxed) == firstlineno
            && entry.filename.load(Ordering::Relaxed) == filename;
        let sent = entry.epoch.load(Ordering::Relaxed) == epoch;
        if state == BUSY || (state == READY && same && sent) {
            return id_of(entry);
        }
        if entry
            .state
            .compare_exchange(state, BUSY, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return id_of(entry); // another thread is (re)sending it
        }
        if !same {
            entry.generation.fetch_add(1, Ordering::Relaxed); // a new object at an old address
        }
    } else {
        entry.state.store(BUSY, Ordering::Release);
    }
    entry.firstlineno.store(firstlineno, Ordering::Relaxed);
    entry.filename.store(filename, Ordering::Relaxed);
    entry.epoch.store(epoch, Ordering::Relaxed);
    let id = id_of(entry);
    if !send(mem, rt, ring, id, code, firstlineno) {
        // The ring was full: not sent. No live epoch is 0, so the next sample of this code
        // object sends it again instead of leaving the collector an id it cannot name.
        entry.epoch.store(0, Ordering::Relaxed);
    }
    entry.state.store(READY, Ordering::Release);
    id
}

/// Send the code object's description; false if the ring had no room for it.
fn send(
    mem: &impl Memory,
    rt: &Runtime,
    ring: &Ring<'_>,
    id: u32,
    code: usize,
    firstlineno: i32,
) -> bool {
    let facts = code::describe(mem, rt.layout, code, MAX_BYTES);
    let (filename, qualname, table) = (facts.filename, facts.qualname, facts.linetable);
    let total = filename.len + qualname.len + table.len;
    let data_records = total.div_ceil(DATA_BYTES) as u64;
    let Some(group) = ring.reserve(1 + data_records) else {
        return false;
    };
    let head = mlprof_wire::Code {
        id,
        firstlineno,
        filename_kind: filename.kind,
        qualname_kind: qualname.kind,
        filename_len: filename.len as u32,
        qualname_len: qualname.len as u32,
        linetable_len: table.len as u64,
        address: code as u64,
    };
    group.set(0, &Record::code(clock::tid(), clock::monotonic_ns(), head));
    let mut chunk = Chunker {
        mem,
        group: &group,
        next: 1,
        buf: [0; DATA_BYTES],
        used: 0,
    };
    for blob in [filename, qualname, table] {
        chunk.copy(blob);
    }
    chunk.flush();
    true
}

/// Fills data records 40 bytes at a time.
struct Chunker<'g, 'r, M> {
    mem: &'g M,
    group: &'g mlprof_wire::Group<'r>,
    next: u64,
    buf: [u8; DATA_BYTES],
    used: usize,
}

impl<M: Memory> Chunker<'_, '_, M> {
    fn copy(&mut self, blob: Blob) {
        let mut done = 0;
        while done < blob.len {
            let n = (DATA_BYTES - self.used).min(blob.len - done);
            // `used < DATA_BYTES` between calls: the `n` bytes after it are in the buffer.
            let Some(to) = self.buf.get_mut(self.used..self.used + n) else {
                return;
            };
            if self.mem.bytes(blob.addr + done, to).is_none() {
                to.fill(b'?');
            }
            self.used += n;
            done += n;
            if self.used == DATA_BYTES {
                self.flush();
            }
        }
    }

    fn flush(&mut self) {
        if self.used == 0 {
            return;
        }
        self.group.set(self.next, &Record::data(&self.buf));
        self.next += 1;
        self.buf = [0; DATA_BYTES];
        self.used = 0;
    }
}
