//! CUDA work a thread without Python does (PyTorch's autograd engine runs a CUDA backward on a
//! device thread of its own: its launches, copies, allocations and the gradients' tensors)
//! goes to the line its process's Python thread was on, waiting for it, as that thread's CPU
//! does, never to `<native thread>`: through the fake CUDA runtime (`tests/fake-cuda`) and
//! the stand-in for PyTorch's allocator (`tests/fake-torch`), figures known by construction
//! (`tests/scripts/gpu_engine.py`).

use mlprof::model::profile::Profile;

use crate::cpu::markers;
use crate::fixture::{self, os};

const SCRIPT: &str = "gpu_engine.py";
const MIB: u64 = 1 << 20;
const NATIVE_THREAD: &str = "<native thread>";

/// The measures of the script's line `@name`, or of `<native thread>`, summed.
fn at(p: &Profile, name: &str) -> mlprof::model::profile::Measures {
    let mut sum = mlprof::model::profile::Measures::default();
    let file = fixture::script(SCRIPT);
    for l in &p.lines {
        let here = match name {
            NATIVE_THREAD => l.file == NATIVE_THREAD,
            _ => l.file == file.to_str().unwrap() && l.line == markers(SCRIPT)[name],
        };
        if here {
            sum.gpu_calls.add(&l.measures.gpu_calls);
            sum.gpu_tensor_peak_bytes += l.measures.gpu_tensor_peak_bytes;
        }
    }
    sum
}

#[test]
fn cuda_work_of_a_thread_without_python_goes_to_the_line_that_waited_for_it() {
    let lib = crate::gpu_calls::framework().to_str().unwrap().to_string();
    let torch = fixture::root().join("tests/fake-torch");
    let pythons = fixture::pythons();
    for py in [pythons.first().unwrap(), pythons.last().unwrap()] {
        let v = &py.minor;
        // The stand-in for PyTorch is not under site-packages: only the script is the user's
        // code, as it would be with PyTorch installed.
        let run = fixture::profile_args(
            &["--profile-only", SCRIPT],
            &[os(&py.exe), os(&fixture::script(SCRIPT)), os(&lib)],
            &[
                ("PYTHONPATH", torch.to_str().unwrap()),
                ("MLPROF_GPU_LAUNCH_SAMPLE", "1"),
            ],
        );
        assert!(run.output.status.success(), "{v}: {:?}", run.output);
        let p = &run.profile;
        let engine = at(p, "engine").gpu_calls;
        assert_eq!(
            (
                engine.gpu_reserved_bytes,
                engine.gpu_h2d_bytes,
                engine.gpu_launches
            ),
            (48 * MIB, MIB, 25),
            "{v}: {engine:?}"
        );
        assert_eq!(at(p, "tensors").gpu_tensor_peak_bytes, 16 * MIB, "{v}");
        let left = at(p, NATIVE_THREAD);
        assert_eq!(
            (
                left.gpu_calls.gpu_reserved_bytes,
                left.gpu_calls.gpu_launches,
                left.gpu_tensor_peak_bytes
            ),
            (0, 0, 0),
            "{v}: on <native thread>: {left:?}"
        );
    }
}
