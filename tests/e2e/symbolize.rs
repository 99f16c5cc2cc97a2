//! The native symbolizer on a live numpy process of every CPython with a numpy venv: its
//! mappings read from `/proc`, the interpreter told from native code, and addresses in BLAS,
//! numpy's ufuncs and the interpreter named by the library they are in.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use mlprof::collect::procfs::read_maps;
use mlprof::recording::maps::{code_class, library_name, CodeClass};
use mlprof::symbolize::native::Symbolizer;

use crate::fixture;

#[test]
fn a_numpy_process_maps_split_into_interpreter_and_native_code() {
    for py in fixture::numpy_pythons() {
        // The address of an exported C API function of the interpreter: named by the
        // dynamic symbols even where the interpreter is stripped (Debian's 3.14 and 3.15).
        let script = "import ctypes, numpy, sys, time\n\
                      f = ctypes.cast(ctypes.pythonapi.PyLong_FromLong, ctypes.c_void_p)\n\
                      print('ready', f.value, flush=True)\ntime.sleep(60)\n";
        let mut child = Command::new(&py.exe)
            .args(["-c", script])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start python");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let maps = read_maps(child.id());
        let _ = child.kill();
        let _ = child.wait();
        let maps = maps.expect("maps of the python child");
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some("ready"));
        let exported: u64 = words
            .next()
            .and_then(|w| w.parse().ok())
            .expect("an address");
        let find = |needle: &str| {
            maps.iter()
                .find(|m| m.executable && library_name(&m.path).contains(needle))
        };
        let umath = find("_multiarray_umath").expect("numpy's ufunc module mapped");
        let blas = find("openblas").expect("numpy's OpenBLAS mapped");
        // A shared build runs the interpreter from libpython, a static one from the executable.
        let interpreter = find(&format!("libpython{}", py.minor))
            .or_else(|| find(&format!("python{}", py.minor)))
            .expect("the interpreter mapped");
        assert_eq!(
            code_class(&interpreter.path),
            CodeClass::Interpreter,
            "{}",
            py.minor
        );
        assert_eq!(code_class(&umath.path), CodeClass::Native);
        assert_eq!(code_class(&blas.path), CodeClass::Native);
        let mut symbolizer = Symbolizer::new();
        for (m, frac) in [(blas, 0), (blas, 3), (umath, 2), (interpreter, 2)] {
            let ip = m.start + (m.end - m.start) * frac / 7;
            let r = symbolizer.resolve(&maps, ip).expect("mapped");
            assert_eq!(r.library, library_name(&m.path));
            assert_eq!(r.class, code_class(&m.path));
        }
        let named = symbolizer.resolve(&maps, exported).expect("mapped");
        assert_eq!(
            (named.class, named.symbol.as_deref()),
            (CodeClass::Interpreter, Some("PyLong_FromLong")),
            "{}: an exported function of the interpreter by name",
            py.minor
        );
    }
}
