//! The frame walker on hand-built thread images, one per CPython layout (`layouts::ALL`): a
//! thread state, its frames and their code objects laid out in an in-memory `Memory` at the
//! offsets of the layout, so the walk is checked without a live interpreter (as rbspy and
//! py-spy test theirs; `recorded_walk.rs` walks images recorded from live interpreters). Each
//! image holds the cases the walker must get right: instruction offsets in each version's
//! encoding, shim frames of the C stack (3.12+), incomplete frames (3.11+), a non-code
//! executable (3.13+), tagged stack references (3.14+), the base frame every chain ends in
//! (3.15+), thread-local bytecode (free-threaded 3.14+), corrupt links and the depth limit.

use mlprof_pyframes::layouts::{FrameKind, InstrKind, Layout, ALL, OWNER_GENERATOR};
use mlprof_pyframes::walk::{walk, walk_ends, Frame};
use mlprof_pyframes::{Interpreter, Memory};

/// `ob_type` of every code object in the images.
const CODE_TYPE: usize = 0x7f00_dead_0000;
/// `ob_type` of a function object that 3.13 can leave in `f_executable`.
const FUNCTION_TYPE: usize = 0x7f00_beef_0000;

/// A process image: bytes at a fixed base address; reads outside it fail.
struct Image {
    base: usize,
    bytes: Vec<u8>,
}

impl Memory for Image {
    fn bytes(&self, addr: usize, out: &mut [u8]) -> Option<()> {
        let start = addr.checked_sub(self.base)?;
        let src = self.bytes.get(start..start.checked_add(out.len())?)?;
        out.copy_from_slice(src);
        Some(())
    }
}

impl Image {
    fn new() -> Image {
        Image {
            base: 0x5600_0000_0000,
            bytes: vec![0; 1 << 20],
        }
    }

    fn put(&mut self, addr: usize, value: &[u8]) {
        let at = addr - self.base;
        self.bytes[at..at + value.len()].copy_from_slice(value);
    }

    fn set_word(&mut self, addr: usize, value: usize) {
        self.put(addr, &value.to_le_bytes());
    }

    fn set_int(&mut self, addr: usize, value: i32) {
        self.put(addr, &value.to_le_bytes());
    }
}

/// One frame to lay out, innermost last.
#[derive(Clone, Copy)]
struct Spec {
    /// Index of its code object.
    code: usize,
    /// Instruction offset in code units.
    units: i32,
    /// `owner` (3.11+).
    owner: u8,
    /// 3.13: `f_executable` is a function object, not code.
    not_code: bool,
    /// Free-threaded 3.14+: the frame runs this thread-local copy of the bytecode.
    tlbc: i32,
}

fn frame(code: usize, units: i32) -> Spec {
    Spec {
        code,
        units,
        owner: 0,
        not_code: false,
        tlbc: 0,
    }
}

/// Lay out `specs` (outermost first) for layout `l`; returns the image, the thread state's
/// address and each frame's address.
fn build(l: &Layout, specs: &[Spec]) -> (Image, usize, Vec<usize>, Vec<usize>) {
    let mut img = Image::new();
    let base = img.base;
    let tstate = base + 0x100;
    let cframe = base + 0x800;
    let codes: Vec<usize> = (0..4).map(|i| base + 0x1000 + i * 0x400).collect();
    for (i, &code) in codes.iter().enumerate() {
        img.set_word(code + l.object_type, CODE_TYPE);
        if let Some(first) = l.code_firsttraceable {
            img.set_int(code + first, 2); // the first two units are the prologue
        }
        if let (Some(tlbc), Some(entries)) = (l.code_tlbc, l.code_array_entries) {
            // Two copies of the bytecode: the inline one, and one of another thread.
            let array = base + 0x3000 + i * 0x40;
            img.set_word(code + tlbc, array);
            img.set_word(array, 2);
            img.set_word(array + entries, code + l.code_adaptive.unwrap());
            img.set_word(array + entries + 8, base + 0x4000 + i * 0x400);
        }
    }
    let function = base + 0x2000;
    img.set_word(function + l.object_type, FUNCTION_TYPE);
    let mut frames = Vec::new();
    // 3.15+: the outermost frame's `previous` is the base frame the thread state points to
    // (embedded after it), owned by the interpreter, holding None (a tagged reference).
    let mut previous = match l.tstate_base_frame {
        Some(at) => {
            let base_frame = tstate + 0x400;
            img.set_word(tstate + at, base_frame);
            img.put(
                base_frame + l.frame_owner.unwrap(),
                &[l.owner_shim.unwrap()],
            );
            img.set_word(base_frame + l.frame_code, function | 1);
            base_frame
        }
        None => 0,
    };
    for (i, spec) in specs.iter().enumerate() {
        let f = base + 0x10000 + i * 0x180;
        let code = codes[spec.code];
        let executable = if spec.not_code { function } else { code };
        // 3.14+: a stack reference, tagged on every other frame (deferred / borrowed).
        let tag = if i % 2 == 1 {
            l.executable_tag_mask & 1
        } else {
            0
        };
        img.set_word(f + l.frame_code, executable | tag);
        img.set_word(f + l.frame_back, previous);
        if let Some(at) = l.frame_tlbc_index {
            img.set_int(f + at, spec.tlbc);
        }
        match l.instr_kind {
            InstrKind::LastiBytes => img.set_int(f + l.frame_instr, spec.units * 2),
            InstrKind::LastiCodeUnits => img.set_int(f + l.frame_instr, spec.units),
            InstrKind::PrevInstr | InstrKind::InstrPtr => {
                let start = match spec.tlbc {
                    0 => code + l.code_adaptive.unwrap(),
                    _ => base + 0x4000 + spec.code * 0x400,
                };
                img.set_word(
                    f + l.frame_instr,
                    (start as isize + 2 * spec.units as isize) as usize,
                );
            }
        }
        if let Some(owner) = l.frame_owner {
            img.put(f + owner, &[spec.owner]);
        }
        frames.push(f);
        previous = f;
    }
    match l.frame_kind {
        FrameKind::Legacy | FrameKind::Direct => img.set_word(tstate + l.tstate_frame, previous),
        FrameKind::Cframe => {
            img.set_word(tstate + l.tstate_frame, cframe);
            img.set_word(cframe + l.cframe_current_frame, previous);
        }
    }
    (img, tstate, codes, frames)
}

fn interpreter(l: &'static Layout) -> Interpreter<'static> {
    Interpreter {
        layout: l,
        code_type: CODE_TYPE,
    }
}

#[test]
fn every_layout_walks_innermost_first_with_its_instruction_encoding() {
    for l in ALL {
        let specs = [frame(0, 10), frame(1, 3), frame(2, 57), frame(1, 4)];
        let (img, tstate, codes, _) = build(l, &specs);
        let mut out = [Frame::default(); 16];
        let w = walk(&img, &interpreter(l), tstate, &mut out);
        assert_eq!(
            (w.depth, w.truncated, w.failed),
            (4, false, false),
            "3.{}",
            l.minor
        );
        let got: Vec<(usize, i32)> = out[..4].iter().map(|f| (f.code, f.lasti)).collect();
        let want = [(codes[1], 4), (codes[2], 57), (codes[1], 3), (codes[0], 10)];
        assert_eq!(got, want, "3.{}", l.minor);
    }
}

#[test]
fn shim_incomplete_and_non_code_frames_are_skipped_where_the_version_has_them() {
    for l in ALL {
        let mut specs = vec![frame(0, 10)];
        let mut want = vec![10];
        if let Some(cstack) = l.owner_shim {
            // 3.12+: the entry shim of a C call into Python.
            specs.push(Spec {
                owner: cstack,
                ..frame(1, 0)
            });
        }
        if l.code_firsttraceable.is_some() {
            // 3.11+: a frame still in its prologue (units below _co_firsttraceable = 2) is
            // skipped, unless a generator owns it.
            specs.push(frame(2, 1));
            specs.push(Spec {
                owner: OWNER_GENERATOR,
                ..frame(2, 1)
            });
            want.push(1);
        }
        if l.frame_kind == FrameKind::Direct {
            specs.push(Spec {
                not_code: true,
                ..frame(3, 5)
            });
        }
        specs.push(frame(3, 7));
        want.push(7);
        let (img, tstate, _, _) = build(l, &specs);
        let mut out = [Frame::default(); 16];
        let w = walk(&img, &interpreter(l), tstate, &mut out);
        assert!(!w.failed && !w.truncated, "3.{}", l.minor);
        let got: Vec<i32> = out[..w.depth].iter().rev().map(|f| f.lasti).collect();
        assert_eq!(got, want, "3.{}", l.minor);
    }
}

#[test]
fn frames_running_thread_local_bytecode_are_read_from_their_copy() {
    for l in ALL.iter().filter(|l| l.frame_tlbc_index.is_some()) {
        let specs = [
            frame(0, 10),
            Spec {
                tlbc: 1,
                ..frame(1, 33)
            },
            frame(2, 5),
        ];
        let (mut img, tstate, _, frames) = build(l, &specs);
        let mut out = [Frame::default(); 16];
        let w = walk(&img, &interpreter(l), tstate, &mut out);
        assert_eq!((w.depth, w.failed), (3, false), "3.{}t", l.minor);
        let got: Vec<i32> = out[..3].iter().map(|f| f.lasti).collect();
        assert_eq!(got, [5, 33, 10], "3.{}t", l.minor);
        // An index past the code's array of copies is a failed walk, not a guessed line.
        img.set_int(frames[1] + l.frame_tlbc_index.unwrap(), 2);
        let w = walk(&img, &interpreter(l), tstate, &mut out);
        assert_eq!((w.depth, w.failed), (1, true), "3.{}t", l.minor);
    }
}

#[test]
fn from_3_15_a_chain_that_does_not_end_in_the_base_frame_is_a_failed_walk() {
    for l in ALL.iter().filter(|l| l.tstate_base_frame.is_some()) {
        let specs = [frame(0, 10), frame(1, 3)];
        let (mut img, tstate, _, frames) = build(l, &specs);
        let mut out = [Frame::default(); 16];
        let w = walk(&img, &interpreter(l), tstate, &mut out);
        assert_eq!((w.depth, w.failed), (2, false), "3.{}", l.minor);
        assert_eq!(w.last, tstate + 0x400);
        // The outermost frame's link cut: what was read is kept, the walk says it failed.
        img.set_word(frames[0] + l.frame_back, 0);
        let w = walk(&img, &interpreter(l), tstate, &mut out);
        assert_eq!((w.depth, w.failed), (2, true), "3.{}", l.minor);
    }
}

#[test]
fn corrupt_chains_end_the_walk_with_the_frames_read_so_far() {
    for l in ALL {
        let specs = [frame(0, 1), frame(1, 2), frame(2, 3)];
        let interp = interpreter(l);
        let mut out = [Frame::default(); 16];

        // A link out of the image: the two inner frames are kept, the walk says it failed.
        let (mut img, tstate, _, frames) = build(l, &specs);
        img.set_word(frames[1] + l.frame_back, 0x10);
        let w = walk(&img, &interp, tstate, &mut out);
        assert_eq!((w.depth, w.failed), (2, true), "3.{}", l.minor);

        // A frame linked to itself.
        let (mut img, tstate, _, frames) = build(l, &specs);
        img.set_word(frames[1] + l.frame_back, frames[1]);
        let w = walk(&img, &interp, tstate, &mut out);
        assert_eq!((w.depth, w.failed), (2, true), "3.{}", l.minor);

        // A code pointer to something that is not code (before 3.13 that is corruption).
        if l.frame_kind != FrameKind::Direct {
            let (mut img, tstate, codes, _) = build(l, &specs);
            img.set_word(codes[1] + l.object_type, FUNCTION_TYPE);
            let w = walk(&img, &interp, tstate, &mut out);
            assert_eq!((w.depth, w.failed), (1, true), "3.{}", l.minor);
        }

        // A cycle of two frames: bounded, reported as truncated.
        let (mut img, tstate, _, frames) = build(l, &specs);
        img.set_word(frames[0] + l.frame_back, frames[2]);
        let mut small = [Frame::default(); 8];
        let w = walk(&img, &interp, tstate, &mut small);
        assert_eq!((w.depth, w.truncated), (8, true), "3.{}", l.minor);

        // No frame at all: a thread between calls, or before its first.
        let (mut img, tstate, _, _) = build(l, &specs);
        match l.frame_kind {
            FrameKind::Cframe => img.set_word(img.base + 0x800 + l.cframe_current_frame, 0),
            _ => img.set_word(tstate + l.tstate_frame, 0),
        }
        let w = walk(&img, &interp, tstate, &mut out);
        assert_eq!(
            (w.depth, w.failed, w.truncated),
            (0, false, false),
            "3.{}",
            l.minor
        );
    }
}

#[test]
fn deep_stacks_keep_the_innermost_frames_and_say_they_were_cut() {
    for l in ALL {
        let specs: Vec<Spec> = (0..40).map(|i| frame(i % 4, i as i32 + 2)).collect();
        let (img, tstate, _, _) = build(l, &specs);
        let mut out = [Frame::default(); 16];
        let w = walk(&img, &interpreter(l), tstate, &mut out);
        assert_eq!(
            (w.depth, w.truncated, w.failed),
            (16, true, false),
            "3.{}",
            l.minor
        );
        assert_eq!(out[0].lasti, 41, "innermost first");
        assert_eq!(out[15].lasti, 26);
    }
}

#[test]
fn deep_stacks_can_keep_both_ends_and_say_they_were_cut() {
    for l in ALL {
        // 40 frames, innermost lasti 41 down to outermost 2.
        let specs: Vec<Spec> = (0..40).map(|i| frame(i % 4, i as i32 + 2)).collect();
        let (img, tstate, _, _) = build(l, &specs);
        let interp = interpreter(l);
        let mut out = [Frame::default(); 16];
        let w = walk_ends(&img, &interp, tstate, &mut out, 4, 100);
        assert_eq!(
            (w.depth, w.truncated, w.failed),
            (16, true, false),
            "3.{}",
            l.minor
        );
        let lasti: Vec<i32> = out.iter().map(|f| f.lasti).collect();
        let want: Vec<i32> = (30..=41).rev().chain((2..=5).rev()).collect();
        assert_eq!(
            lasti, want,
            "3.{}: 12 innermost, then the 4 outermost",
            l.minor
        );
        // Every ring position: the outer end stays in order whatever the depth.
        for depth in 17..40 {
            let specs: Vec<Spec> = (0..depth).map(|i| frame(i % 4, i as i32 + 2)).collect();
            let (img, tstate, _, _) = build(l, &specs);
            let w = walk_ends(&img, &interp, tstate, &mut out, 4, 100);
            assert_eq!((w.depth, w.truncated), (16, true));
            let outer: Vec<i32> = out[12..].iter().map(|f| f.lasti).collect();
            assert_eq!(outer, vec![5, 4, 3, 2], "3.{} at depth {depth}", l.minor);
        }
        // A stack that fits is whole, as `walk` gives it.
        let specs: Vec<Spec> = (0..10).map(|i| frame(i % 4, i as i32 + 2)).collect();
        let (img, tstate, _, _) = build(l, &specs);
        let w = walk_ends(&img, &interp, tstate, &mut out, 4, 100);
        assert_eq!((w.depth, w.truncated), (10, false));
        // Past `limit` frames the outer ring holds the last of those within it.
        let specs: Vec<Spec> = (0..40).map(|i| frame(i % 4, i as i32 + 2)).collect();
        let (img, tstate, _, _) = build(l, &specs);
        let w = walk_ends(&img, &interp, tstate, &mut out, 4, 20);
        assert_eq!((w.depth, w.truncated), (16, true));
        let outer: Vec<i32> = out[12..].iter().map(|f| f.lasti).collect();
        assert_eq!(outer, vec![25, 24, 23, 22], "3.{}", l.minor);
    }
}
