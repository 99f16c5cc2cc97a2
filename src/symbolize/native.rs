//! Maps native instruction pointers of a profiled process to library + symbol; reads ELF files
//! from disk and caches each file's parsed symbol table; knows nothing about Python frames.
//!
//! The collector snapshots `/proc/PID/maps` (`collect::procfs::read_maps`) while the target
//! lives, then
//! [`Symbolizer::resolve`] works from the files on disk, so it also works after the target
//! exited. Per IP:
//!
//! 1. the mapping that contains it names the library and the [`CodeClass`] ([`code_class`]);
//! 2. `file_offset = ip - map.start + map.offset`; the `PT_LOAD` segment holding that offset
//!    turns it into an ELF virtual address (`vaddr = file_offset - p_offset + p_vaddr`), which
//!    is right for PIE executables, shared objects and fixed-address executables alike;
//! 3. the function symbol (`STT_FUNC`, `STT_GNU_IFUNC`) containing that address is found by
//!    binary search in the file's `.symtab` (or `.dynsym` when `.symtab` has no functions,
//!    together with the `.symtab` of its MiniDebugInfo, the xz-compressed ELF in
//!    `.gnu_debugdata` that Fedora/RHEL builds carry and manylinux wheels copy along: libgomp's
//!    internal functions are named there); a size-0 symbol extends to the next symbol; names
//!    are demangled (Itanium C++, Rust).
//!
//! Choices:
//! * files are cached per (device, inode, size, mtime), so a file is parsed once per run even
//!   when reached under two paths; only the ELF headers, the symbol table and its string table
//!   are read (never the whole file), so a libtorch-size library costs its symbol table only;
//!   symbols are 16-byte entries with their names in one arena;
//! * a mapping whose path ends in ` (deleted)` keeps its library name but gets no symbol: the
//!   file now at that path (if any) is not what the process ran;
//! * `[vdso]` gets no symbol (it is not a file);
//! * a mapped file is read through the mapping's own inode while the process runs and the
//!   kernel allows (`/proc/PID/map_files`), else through `/proc/PID/root/PATH` or the path as
//!   seen from this process, and only when it is the inode the mapping names, a regular file
//!   of at most [`mapped::MAX_LIBRARY_BYTES`], read in pieces of at most
//!   [`mapped::MAX_READ_BYTES`] in all ([`mapped`]: a path may name anything by now);
//! * missing, unreadable, non-regular, replaced or corrupt files give `symbol: None` but still
//!   a library;
//! * DWARF (file/line, inlined frames) is not read here: that comes later, on demand, through
//!   `addr2line` (which shares this module's `object` version), because libtorch-size DWARF
//!   costs seconds and gigabytes.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, SectionTable, Sym as _};
use object::read::{ReadRef, StringTable};
use object::{Endianness, FileKind};

use crate::recording::mapped::{self, Bounded};
use crate::recording::maps::{code_class, find_mapping, library_name, CodeClass, MappedFile};

/// What an instruction pointer resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// File name only, e.g. `libopenblas64_p-r0-5e0b5b9a.3.23.dev.so` (no ` (deleted)`).
    pub library: String,
    /// The mapping's path as in the maps snapshot.
    pub path: String,
    /// Demangled function name (`dgemm_kernel_HASWELL`, `ns::f(int)`), if one was found.
    pub symbol: Option<String>,
    /// Interpreter or native time.
    pub class: CodeClass,
    /// Offset of the address in the library's file (stable from run to run, unlike the
    /// address; what `addr2line -e LIBRARY` takes).
    pub file_offset: u64,
    /// Without a symbol: the file offset where the function holding the address starts, from
    /// the library's unwind table (`ehframe`), so that one unnamed function is one name.
    pub function_offset: Option<u64>,
}

impl Resolved {
    /// The function's name, or `library+0xOFFSET` when the file names none there (a stripped
    /// library's internal function): the offset of the function's start where the unwind
    /// table gives it, else of the address.
    pub fn name(&self) -> String {
        match &self.symbol {
            Some(symbol) => symbol.clone(),
            None => format!(
                "{}+{:#x}",
                self.library,
                self.function_offset.unwrap_or(self.file_offset)
            ),
        }
    }
}

/// One function symbol: `[start, start + len)` in ELF virtual addresses; its name starts at
/// `name` in the arena and ends at the next NUL.
#[derive(Clone, Copy, Debug)]
struct Sym {
    start: u64,
    len: u32,
    name: u32,
}

/// A `PT_LOAD` segment: file range `[offset, offset + filesz)` is loaded at `vaddr`.
#[derive(Clone, Copy, Debug)]
struct Segment {
    offset: u64,
    filesz: u64,
    vaddr: u64,
    executable: bool,
}

/// What the symbolizer keeps of one ELF file.
#[derive(Debug, Default)]
struct FileSymbols {
    segments: Vec<Segment>,
    /// Sorted by `start`, one symbol per start address.
    syms: Vec<Sym>,
    /// NUL-separated raw (mangled) names, as the file has them (decoded when looked up:
    /// large libraries have hundreds of thousands, and a profile names a few).
    names: Vec<u8>,
    build_id: Option<Vec<u8>>,
    /// Demangled names of the symbols looked up so far, by index in `syms`.
    demangled: HashMap<u32, Box<str>>,
    /// Function starts (virtual addresses, sorted) from `.eh_frame_hdr`, for addresses no
    /// symbol holds: only those starts, when `wanted` was given.
    function_starts: Vec<u64>,
}

/// File identity for the parse cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

/// Resolves instruction pointers against a maps snapshot, caching each file's symbols.
#[derive(Debug, Default)]
pub struct Symbolizer {
    /// (Path, device, inode) → index in `files`; `None` when that mapping's file could not be
    /// read.
    by_path: HashMap<(String, u64, u64), Option<usize>>,
    by_key: HashMap<FileKey, usize>,
    files: Vec<FileSymbols>,
    /// File offsets that will be looked up, by path ([`Symbolizer::want`]): a file with some
    /// keeps only the symbols that contain them.
    wanted: HashMap<String, Vec<u64>>,
    /// The process whose mappings are resolved, when it may still run: its files are read
    /// through `/proc/PID/map_files` first.
    pid: Option<u32>,
}

impl Symbolizer {
    /// An empty symbolizer; files are parsed on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// Library, class and (when found) function for `ip`; `None` if no mapping contains it.
    pub fn resolve(&mut self, maps: &[MappedFile], ip: u64) -> Option<Resolved> {
        let map = find_mapping(maps, ip)?;
        let symbol = self.symbol_for(map, ip);
        let function_offset = match symbol {
            Some(_) => None,
            None => self.function_start_for(map, ip),
        };
        Some(Resolved {
            library: library_name(&map.path).to_owned(),
            path: map.path.clone(),
            symbol,
            class: code_class(&map.path),
            file_offset: ip - map.start + map.offset,
            function_offset,
        })
    }

    /// Say which instruction pointers will be resolved against `maps`, before resolving any:
    /// files are then read for the symbols containing them only, instead of a table of all
    /// their functions (a large C++ library has hundreds of thousands, with tens of MB of
    /// names). Others still resolve, reading their files in full.
    pub fn want(&mut self, maps: &[MappedFile], ips: impl IntoIterator<Item = u64>) {
        for ip in ips {
            let Some(map) = find_mapping(maps, ip) else {
                continue;
            };
            if let Some(offset) = ip
                .checked_sub(map.start)
                .and_then(|d| d.checked_add(map.offset))
            {
                self.wanted
                    .entry(map.path.clone())
                    .or_default()
                    .push(offset);
            }
        }
    }

    /// Read the files of the mappings resolved from now on through process `pid`'s
    /// `/proc/PID/map_files` first (where permitted, and while it runs), else by path.
    pub fn in_process(&mut self, pid: Option<u32>) {
        self.pid = pid;
    }

    /// GNU build-id of the file `map` maps (parsing it if needed), for recording
    /// `build-id + offset` so that symbolization can be redone elsewhere.
    pub fn build_id(&mut self, map: &MappedFile) -> Option<Vec<u8>> {
        let index = self.file_index(map)?;
        self.files[index].build_id.clone()
    }

    fn symbol_for(&mut self, map: &MappedFile, ip: u64) -> Option<String> {
        if !map.path.starts_with('/') || map.path.ends_with(" (deleted)") {
            return None;
        }
        let index = self.file_index(map)?;
        let file = &mut self.files[index];
        let file_offset = ip.checked_sub(map.start)?.checked_add(map.offset)?;
        let vaddr = file.vaddr_of(file_offset)?;
        let sym = file.lookup(vaddr)?;
        Some(file.demangled_name(sym))
    }

    /// The file offset where the unnamed function holding `ip` starts, by the unwind table.
    fn function_start_for(&mut self, map: &MappedFile, ip: u64) -> Option<u64> {
        if !map.path.starts_with('/') || map.path.ends_with(" (deleted)") {
            return None;
        }
        let index = self.file_index(map)?;
        let file = &self.files[index];
        let vaddr = file.vaddr_of(ip.checked_sub(map.start)?.checked_add(map.offset)?)?;
        file.offset_of(super::ehframe::function_of(&file.function_starts, vaddr)?)
    }

    fn file_index(&mut self, map: &MappedFile) -> Option<usize> {
        let id = (map.path.clone(), map.dev, map.inode);
        if let Some(&entry) = self.by_path.get(&id) {
            return entry;
        }
        let entry = self.load(map);
        self.by_path.insert(id, entry);
        entry
    }

    fn load(&mut self, map: &MappedFile) -> Option<usize> {
        // Never a FIFO, device node or a file put at the path since it was mapped; read in
        // bounded pieces (`mapped`).
        let opened = mapped::open_mapped(self.pid, map, mapped::MAX_LIBRARY_BYTES).ok()?;
        let meta = opened.meta;
        let key = FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        };
        if let Some(&index) = self.by_key.get(&key) {
            return Some(index);
        }
        let file = opened.file;
        let mut wanted = self.wanted.remove(&map.path);
        if let Some(w) = &mut wanted {
            w.sort_unstable();
            w.dedup();
        }
        let symbols = FileSymbols::load(file, wanted.as_deref()).unwrap_or_default();
        self.files.push(symbols);
        let index = self.files.len() - 1;
        self.by_key.insert(key, index);
        Some(index)
    }
}

impl FileSymbols {
    /// Parses an ELF file's segments, build-id and function symbols (only those containing
    /// the sorted file offsets `wanted`, when given); `None` if not ELF.
    fn load(file: File, wanted: Option<&[u64]>) -> Option<FileSymbols> {
        let data = Bounded::new(file);
        match FileKind::parse(&data).ok()? {
            FileKind::Elf32 => load_elf::<elf::FileHeader32<Endianness>>(&data, wanted),
            FileKind::Elf64 => load_elf::<elf::FileHeader64<Endianness>>(&data, wanted),
            _ => None,
        }
    }

    /// ELF virtual address of a file offset, via the `PT_LOAD` segment holding it
    /// (an executable one if several do).
    fn vaddr_of(&self, file_offset: u64) -> Option<u64> {
        let seg = self
            .segments
            .iter()
            .filter(|s| file_offset >= s.offset && file_offset - s.offset < s.filesz)
            .min_by_key(|s| !s.executable)?;
        (file_offset - seg.offset).checked_add(seg.vaddr)
    }

    /// File offset of an ELF virtual address, via the `PT_LOAD` segment holding it.
    fn offset_of(&self, vaddr: u64) -> Option<u64> {
        let seg = self
            .segments
            .iter()
            .filter(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)
            .min_by_key(|s| !s.executable)?;
        (vaddr - seg.vaddr).checked_add(seg.offset)
    }

    /// Index of the symbol containing `vaddr`. Looks a few symbols back so that an address
    /// past a small symbol nested in a larger one still finds the larger one.
    fn lookup(&self, vaddr: u64) -> Option<u32> {
        let pos = self.syms.partition_point(|s| s.start <= vaddr);
        (pos.saturating_sub(8)..pos)
            .rev()
            .find(|&i| vaddr - self.syms[i].start < u64::from(self.syms[i].len))
            .and_then(|i| u32::try_from(i).ok())
    }

    fn demangled_name(&mut self, sym: u32) -> String {
        if let Some(name) = self.demangled.get(&sym) {
            return name.to_string();
        }
        let start = self.syms.get(sym as usize).map_or(0, |s| s.name as usize);
        let raw = self.names.get(start..).unwrap_or_default();
        let raw = raw.split(|&b| b == 0).next().unwrap_or_default();
        let name = demangle(&String::from_utf8_lossy(raw));
        self.demangled.insert(sym, name.clone().into_boxed_str());
        name
    }
}

fn load_elf<Elf: FileHeader<Endian = Endianness>>(
    data: &Bounded,
    wanted: Option<&[u64]>,
) -> Option<FileSymbols> {
    let header = Elf::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let mut out = FileSymbols::default();
    if let Ok(phdrs) = header.program_headers(endian, data) {
        out.segments = phdrs
            .iter()
            .filter(|p| p.p_type(endian) == elf::PT_LOAD)
            .map(|p| Segment {
                offset: p.p_offset(endian).into(),
                filesz: p.p_filesz(endian).into(),
                vaddr: p.p_vaddr(endian).into(),
                executable: p.p_flags(endian) & elf::PF_X != 0,
            })
            .collect();
    }
    let Ok(sections) = header.sections(endian, data) else {
        return Some(out);
    };
    out.build_id = find_build_id(&sections, endian, data);
    let wanted: Option<Vec<u64>> = wanted.map(|offsets| {
        let mut v: Vec<u64> = offsets.iter().filter_map(|&o| out.vaddr_of(o)).collect();
        v.sort_unstable();
        v
    });
    let wanted = wanted.as_deref();
    let table = read_functions(&sections, endian, data, elf::SHT_SYMTAB, wanted)
        .filter(|(syms, _)| !syms.is_empty())
        .or_else(|| {
            let dynamic = read_functions(&sections, endian, data, elf::SHT_DYNSYM, wanted);
            match mini_debuginfo(&sections, endian, data, wanted) {
                Some(mini) => Some(merge_tables(dynamic.unwrap_or_default(), mini)),
                None => dynamic,
            }
        });
    if let Some((syms, names)) = table {
        out.syms = syms;
        out.names = names;
    }
    let unnamed: Vec<u64> = match wanted {
        Some(w) => w
            .iter()
            .copied()
            .filter(|&v| out.lookup(v).is_none())
            .collect(),
        None => Vec::new(),
    };
    if wanted.is_none() || !unnamed.is_empty() {
        out.function_starts =
            eh_frame_starts(&sections, endian, data, wanted.map(|_| &unnamed[..]));
    }
    Some(out)
}

/// Most bytes of `.eh_frame_hdr` read (a libtorch-size library's is a few MiB).
const MAX_EH_FRAME_HDR: u64 = 64 << 20;

/// Function starts from `.eh_frame_hdr`: all of them, or (with `unnamed`, sorted addresses no
/// symbol holds) only the start of each of their functions.
fn eh_frame_starts<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(
    sections: &SectionTable<'data, Elf, R>,
    endian: Endianness,
    data: R,
    unnamed: Option<&[u64]>,
) -> Vec<u64> {
    let Some((_, section)) = sections.section_by_name(endian, b".eh_frame_hdr") else {
        return Vec::new();
    };
    let size: u64 = section.sh_size(endian).into();
    if size > MAX_EH_FRAME_HDR {
        return Vec::new();
    }
    let Ok(bytes) = section.data(endian, data) else {
        return Vec::new();
    };
    let starts = super::ehframe::function_starts(bytes, section.sh_addr(endian).into());
    match unnamed {
        None => starts,
        Some(addresses) => {
            let mut kept: Vec<u64> = addresses
                .iter()
                .filter_map(|&v| super::ehframe::function_of(&starts, v))
                .collect();
            kept.dedup();
            kept
        }
    }
}

/// Most bytes a `.gnu_debugdata` section may decompress to (real ones are tens of KiB).
const MAX_MINI_DEBUGINFO: usize = 64 << 20;

/// The function symbols of the file's MiniDebugInfo: `.gnu_debugdata`, an xz-compressed ELF
/// whose `.symtab` holds the functions `.dynsym` lacks, at the same addresses.
fn mini_debuginfo<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(
    sections: &SectionTable<'data, Elf, R>,
    endian: Endianness,
    data: R,
    wanted: Option<&[u64]>,
) -> Option<(Vec<Sym>, Vec<u8>)> {
    let (_, section) = sections.section_by_name(endian, b".gnu_debugdata")?;
    let compressed = section.data(endian, data).ok()?;
    let mut elf = Capped(Vec::new());
    lzma_rs::xz_decompress(&mut std::io::BufReader::new(compressed), &mut elf).ok()?;
    let bytes = elf.0.as_slice();
    let inner = Elf::parse(bytes).ok()?;
    let inner_endian = inner.endian().ok()?;
    let inner_sections = inner.sections(inner_endian, bytes).ok()?;
    read_functions(
        &inner_sections,
        inner_endian,
        bytes,
        elf::SHT_SYMTAB,
        wanted,
    )
}

/// A buffer that refuses to grow past [`MAX_MINI_DEBUGINFO`] (a hostile section is not a
/// reason to exhaust memory).
struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_MINI_DEBUGINFO {
            return Err(std::io::Error::other("MiniDebugInfo too large"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Two symbol tables as one, sorted by address; at an address both name, `first`'s symbol.
fn merge_tables(first: (Vec<Sym>, Vec<u8>), second: (Vec<Sym>, Vec<u8>)) -> (Vec<Sym>, Vec<u8>) {
    let (mut syms, mut names) = first;
    let Ok(base) = u32::try_from(names.len()) else {
        return (syms, names);
    };
    names.extend_from_slice(&second.1);
    syms.extend(second.0.into_iter().filter_map(|s| {
        Some(Sym {
            name: s.name.checked_add(base)?,
            ..s
        })
    }));
    syms.sort_by_key(|s| s.start); // stable: `first`'s symbol stays ahead at equal starts
    syms.dedup_by_key(|s| s.start);
    (syms, names)
}

fn find_build_id<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(
    sections: &SectionTable<'data, Elf, R>,
    endian: Endianness,
    data: R,
) -> Option<Vec<u8>> {
    for section in sections.iter() {
        let Ok(Some(mut notes)) = section.notes(endian, data) else {
            continue;
        };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == elf::ELF_NOTE_GNU && note.n_type(endian) == elf::NT_GNU_BUILD_ID {
                return Some(note.desc().to_vec());
            }
        }
    }
    None
}

/// A function symbol before the table is built.
struct Candidate<'data> {
    start: u64,
    size: u64,
    /// End of the symbol's section (bounds a size-0 symbol that is last).
    section_end: u64,
    /// Lower is preferred among symbols at one address.
    rank: (bool, u8, usize, usize),
    name: &'data [u8],
}

/// Function symbols of the first section of type `sh_type` (one bulk read each for the
/// symbols and their string table). With `wanted` (sorted virtual addresses), only the
/// symbols that contain one of them, their names read one by one.
fn read_functions<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(
    sections: &SectionTable<'data, Elf, R>,
    endian: Endianness,
    data: R,
    sh_type: u32,
    wanted: Option<&[u64]>,
) -> Option<(Vec<Sym>, Vec<u8>)> {
    let section = sections.iter().find(|s| s.sh_type(endian) == sh_type)?;
    let raw: &[Elf::Sym] = section.data_as_array(endian, data).ok()?;
    let strings_section = sections.section(section.link(endian)).ok()?;
    let functions = raw.iter().filter(|sym| {
        let kind = sym.st_type();
        (kind == elf::STT_FUNC || kind == elf::STT_GNU_IFUNC)
            && sym.st_shndx(endian) != elf::SHN_UNDEF
            && sym.st_name(endian) != 0
            && Into::<u64>::into(sym.st_value(endian)) != 0
    });
    let candidate = |sym: &Elf::Sym, name: &'data [u8], size: u64| {
        let start: u64 = sym.st_value(endian).into();
        let bind_rank = match sym.st_bind() {
            elf::STB_GLOBAL => 0,
            elf::STB_WEAK => 1,
            _ => 2,
        };
        let underscores = name.iter().take_while(|&&b| b == b'_').count();
        let declared: u64 = sym.st_size(endian).into();
        Candidate {
            start,
            size,
            section_end: section_end(sections, endian, sym.st_shndx(endian)),
            rank: (declared == 0, bind_rank, underscores, name.len()),
            name,
        }
    };
    let mut candidates = Vec::new();
    match wanted {
        None => {
            let strdata = strings_section.data(endian, data).ok()?;
            let strings = StringTable::new(strdata, 0, strdata.len() as u64);
            for sym in functions {
                let name = sym.name(endian, strings).unwrap_or_default();
                if !name.is_empty() {
                    candidates.push(candidate(sym, name, sym.st_size(endian).into()));
                }
            }
        }
        Some(wanted) => {
            // Names are read from the file one by one, for the few symbols kept.
            let (offset, size) = strings_section.file_range(endian)?;
            let strings = StringTable::new(data, offset, offset.checked_add(size)?);
            let mut starts: Vec<u64> = functions
                .clone()
                .map(|s| s.st_value(endian).into())
                .collect();
            starts.sort_unstable();
            starts.dedup();
            for sym in functions {
                let start: u64 = sym.st_value(endian).into();
                let declared: u64 = sym.st_size(endian).into();
                // A size-0 symbol extends to the next function or its section's end.
                let end = if declared > 0 {
                    start.saturating_add(declared)
                } else {
                    let next = starts[starts.partition_point(|&s| s <= start)..]
                        .first()
                        .copied()
                        .unwrap_or(u64::MAX);
                    let limit = section_end(sections, endian, sym.st_shndx(endian));
                    match next.min(if limit > start { limit } else { u64::MAX }) {
                        u64::MAX => start.saturating_add(1),
                        end => end,
                    }
                };
                let first = wanted.partition_point(|&w| w < start);
                if wanted.get(first).is_none_or(|&w| w >= end) {
                    continue;
                }
                let name = sym.name(endian, strings).unwrap_or_default();
                if !name.is_empty() {
                    candidates.push(candidate(sym, name, end - start));
                }
            }
        }
    }
    Some(build_table(candidates))
}

fn section_end<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(
    sections: &SectionTable<'data, Elf, R>,
    endian: Endianness,
    shndx: u16,
) -> u64 {
    if shndx >= elf::SHN_LORESERVE {
        return 0;
    }
    let index = object::SectionIndex(usize::from(shndx));
    sections.section(index).map_or(0, |s| {
        let addr: u64 = s.sh_addr(endian).into();
        addr.saturating_add(s.sh_size(endian).into())
    })
}

/// Sorts candidates, keeps the preferred one per address, gives size-0 symbols the room up
/// to the next symbol (or their section's end), and moves names into one arena.
fn build_table(mut candidates: Vec<Candidate<'_>>) -> (Vec<Sym>, Vec<u8>) {
    // Aliases of equal rank are told apart by name, so that the choice does not depend on
    // which other symbols were read.
    candidates.sort_unstable_by(|a, b| (a.start, a.rank, a.name).cmp(&(b.start, b.rank, b.name)));
    candidates.dedup_by_key(|c| c.start);
    let mut syms = Vec::with_capacity(candidates.len());
    let mut names = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        let end = if c.size > 0 {
            c.start.saturating_add(c.size)
        } else {
            let next = candidates.get(i + 1).map_or(u64::MAX, |n| n.start);
            let limit = if c.section_end > c.start {
                c.section_end
            } else {
                u64::MAX
            };
            match next.min(limit) {
                u64::MAX => c.start.saturating_add(1),
                end => end,
            }
        };
        let Ok(name) = u32::try_from(names.len()) else {
            break; // a 4 GiB name arena: keep what fits
        };
        names.extend_from_slice(c.name);
        names.push(0);
        let len = u32::try_from(end - c.start).unwrap_or(u32::MAX);
        syms.push(Sym {
            start: c.start,
            len,
            name,
        });
    }
    syms.shrink_to_fit();
    names.shrink_to_fit();
    (syms, names)
}

/// Demangles Rust (legacy and v0, hash dropped) and Itanium C++ names; others unchanged.
fn demangle(raw: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(raw) {
        return format!("{rust:#}");
    }
    if raw.starts_with("_Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(raw.as_bytes()) {
            let options = cpp_demangle::DemangleOptions::new().no_return_type();
            if let Ok(name) = symbol.demangle(&options) {
                return name;
            }
        }
    }
    raw.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::procfs::{parse_maps, read_maps};
    use std::io::Write;

    const SAMPLE_MAPS: &str = "\
55d0c8a00000-55d0c8a01000 r--p 00000000 08:01 1234                       /usr/bin/python3.11
55d0c8a01000-55d0c8a02000 r-xp 00001000 08:01 1234                       /usr/bin/python3.11
55d0c9000000-55d0c9100000 rw-p 00000000 00:00 0                          [heap]
7f1c00000000-7f1c00021000 rw-p 00000000 00:00 0 
7f1c10000000-7f1c10200000 r-xp 00010000 08:01 777                        /opt/my libs/lib with space.so
7f1c20000000-7f1c20400000 r-xp 00028000 08:01 555                        /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c30000000-7f1c30001000 r-xp 00000000 00:05 999                        /tmp/jit-1234.so (deleted)
7ffd6e5f0000-7ffd6e611000 rw-p 00000000 00:00 0                          [stack]
7ffd6e7d2000-7ffd6e7d6000 r--p 00000000 00:00 0                          [vvar]
7ffd6e7d6000-7ffd6e7d8000 r-xp 00000000 00:00 0                          [vdso]
this is not a maps line
zzzz-1000 r-xp 00000000 08:01 1 /bad/start
2000-1000 r-xp 00000000 08:01 1 /bad/order
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    #[test]
    fn parse_maps_keeps_files_and_vdso() {
        let maps = parse_maps(SAMPLE_MAPS);
        let paths: Vec<&str> = maps.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/usr/bin/python3.11",
                "/usr/bin/python3.11",
                "/opt/my libs/lib with space.so",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "/tmp/jit-1234.so (deleted)",
                "[vdso]",
            ]
        );
        assert_eq!(
            maps[1],
            MappedFile {
                start: 0x55d0c8a01000,
                end: 0x55d0c8a02000,
                offset: 0x1000,
                path: "/usr/bin/python3.11".into(),
                executable: true,
                dev: crate::recording::mapped::makedev(8, 1),
                inode: 1234,
            }
        );
        assert!(!maps[0].executable);
        assert_eq!(maps[3].offset, 0x28000);
        assert_eq!(library_name(&maps[4].path), "jit-1234.so");
        assert!(parse_maps("").is_empty());
        assert!(parse_maps("\n\n  \n00-").is_empty());
    }

    #[test]
    fn demangles_rust_and_cpp_and_keeps_c() {
        assert_eq!(demangle("dgemm_kernel_HASWELL"), "dgemm_kernel_HASWELL");
        assert_eq!(demangle("_ZN2ns1fEi"), "ns::f(int)");
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_Z"), "_Z");
        // A part GCC split off a function (its cold path) keeps the function's name, marked.
        assert_eq!(demangle("_ZN2ns1fEi.cold"), "ns::f(int) [clone .cold]");
    }

    fn own_maps() -> Vec<MappedFile> {
        read_maps(std::process::id()).expect("read own maps")
    }

    /// Address of libc's `getpid` (not a PLT stub of the test binary).
    fn getpid_address() -> u64 {
        let name = c"getpid";
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks the name up.
        let addr = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as u64;
        assert_ne!(addr, 0);
        addr
    }

    #[test]
    fn resolves_libc_function_in_this_process() {
        let addr = getpid_address();
        let mut symbolizer = Symbolizer::new();
        let r = symbolizer
            .resolve(&own_maps(), addr)
            .expect("getpid is mapped");
        assert!(r.library.starts_with("libc.so"), "{r:?}");
        assert_eq!(r.class, CodeClass::Interpreter);
        let symbol = r.symbol.as_deref().unwrap_or("");
        assert!(symbol == "getpid" || symbol == "__getpid", "{r:?}");
        let maps = own_maps();
        let map = find_mapping(&maps, addr).expect("mapped");
        assert!(symbolizer.build_id(map).is_some_and(|id| !id.is_empty()));
        // Inside the function, not only at its start.
        let inside = symbolizer.resolve(&own_maps(), addr + 1).expect("mapped");
        assert_eq!(inside.symbol, r.symbol);
    }

    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn mlprof_native_test_marker(x: u64) -> u64 {
        std::hint::black_box(x.wrapping_mul(31).rotate_left(7))
    }

    #[inline(never)]
    fn rust_marker_function(x: u64) -> u64 {
        std::hint::black_box(x.wrapping_mul(17).rotate_left(3))
    }

    #[test]
    fn resolves_functions_of_the_test_binary() {
        let maps = own_maps();
        let mut symbolizer = Symbolizer::new();
        let c_addr = mlprof_native_test_marker as *const () as usize as u64;
        let r = symbolizer.resolve(&maps, c_addr).expect("mapped");
        assert_eq!(
            r.symbol.as_deref(),
            Some("mlprof_native_test_marker"),
            "{r:?}"
        );
        assert_eq!(r.class, CodeClass::Native);
        let exe = std::env::current_exe().unwrap();
        assert_eq!(r.library, exe.file_name().unwrap().to_str().unwrap());
        let rust_addr = rust_marker_function as *const () as usize as u64;
        let r = symbolizer.resolve(&maps, rust_addr + 2).expect("mapped");
        let symbol = r.symbol.unwrap_or_default();
        assert!(symbol.contains("rust_marker_function"), "{symbol}");
        assert!(!symbol.contains("17h"), "hash kept: {symbol}");
        assert_eq!(
            mlprof_native_test_marker(1) ^ rust_marker_function(1),
            mlprof_native_test_marker(1) ^ rust_marker_function(1)
        );
    }

    #[test]
    fn unmapped_anon_vdso_and_deleted_give_none_symbols() {
        let maps = parse_maps(SAMPLE_MAPS);
        let mut symbolizer = Symbolizer::new();
        assert_eq!(symbolizer.resolve(&maps, 0x10), None);
        assert_eq!(symbolizer.resolve(&maps, 0x7f1c00000010), None); // anonymous
        assert_eq!(symbolizer.resolve(&maps, 0x55d0c9000010), None); // [heap]
        let vdso = symbolizer.resolve(&maps, 0x7ffd6e7d6100).unwrap();
        assert_eq!((vdso.library.as_str(), vdso.symbol), ("[vdso]", None));
        assert_eq!(vdso.class, CodeClass::Interpreter);
        let deleted = symbolizer.resolve(&maps, 0x7f1c30000010).unwrap();
        assert_eq!(
            (deleted.library.as_str(), deleted.symbol),
            ("jit-1234.so", None)
        );
        let spaced = symbolizer.resolve(&maps, 0x7f1c10000010).unwrap(); // missing file
        assert_eq!(spaced.library, "lib with space.so");
        // 0x10 into a mapping of the file from offset 0x10000.
        assert_eq!(spaced.name(), "lib with space.so+0x10010");
        assert_eq!((spaced.symbol, spaced.class), (None, CodeClass::Native));
        // Unsorted maps still resolve.
        let mut reversed = maps.clone();
        reversed.reverse();
        assert_eq!(
            symbolizer
                .resolve(&reversed, 0x7f1c10000010)
                .unwrap()
                .library,
            spaced.library
        );
    }

    fn scratch_file(tag: &str, bytes: &[u8]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("mlprof-native-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(tag);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
        path
    }

    fn resolve_in_file(path: &str, ip_offset: u64) -> Option<Resolved> {
        let map = MappedFile {
            start: 0x7000_0000_0000,
            end: 0x7000_1000_0000,
            offset: 0,
            path: path.to_owned(),
            executable: true,
            dev: 0,
            inode: 0,
        };
        Symbolizer::new().resolve(&[map], 0x7000_0000_0000 + ip_offset)
    }

    #[test]
    fn corrupt_elf_gives_none_symbol_without_panic() {
        let libc_path = own_maps()
            .into_iter()
            .find(|m| library_name(&m.path).starts_with("libc.so"))
            .map(|m| m.path)
            .unwrap();
        let real = std::fs::read(&libc_path).unwrap();
        let mut cases: Vec<(String, Vec<u8>)> = vec![
            ("empty".into(), vec![]),
            ("magic-only".into(), b"\x7fELF".to_vec()),
            (
                "ident-only".into(),
                b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0".to_vec(),
            ),
            ("text".into(), b"not an elf at all".to_vec()),
            ("truncated-header".into(), real[..40].to_vec()),
            ("truncated-4k".into(), real[..4096].to_vec()),
            ("truncated-half".into(), real[..real.len() / 2].to_vec()),
        ];
        // Scribble over the header fields and the section header table.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for round in 0..24 {
            let mut bytes = real.clone();
            let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
            for _ in 0..64 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = if round % 2 == 0 {
                    (seed % 64) as usize
                } else {
                    shoff + (seed % 4096) as usize
                };
                if let Some(b) = bytes.get_mut(at) {
                    *b = (seed >> 32) as u8;
                }
            }
            cases.push((format!("fuzz-{round}"), bytes));
        }
        for (tag, bytes) in cases {
            let path = scratch_file(&tag, &bytes);
            let path = path.to_str().unwrap();
            for off in [0u64, 0x40, 0x1000, 0x28000, 0x30000, 0x100000] {
                let r = resolve_in_file(path, off).expect("mapped");
                assert_eq!(r.library, tag);
                if !tag.starts_with("fuzz") {
                    assert_eq!(r.symbol, None, "{tag} {off:#x}");
                }
            }
        }
        let dir = std::env::temp_dir().join(format!("mlprof-native-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn one_parse_per_file_across_paths() {
        let maps = own_maps();
        let libc = find_mapping(&maps, getpid_address()).unwrap();
        let dir = std::env::temp_dir().join(format!("mlprof-native-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A link to libc's directory: the same file under another path (a link to the file
        // itself is not followed: `maps` never names one).
        let link = dir.join("lib-link");
        let _ = std::fs::remove_file(&link);
        let libc_path = std::path::Path::new(&libc.path);
        std::os::unix::fs::symlink(libc_path.parent().unwrap(), &link).unwrap();
        let mut linked = libc.clone();
        linked.path = link
            .join(libc_path.file_name().unwrap())
            .to_string_lossy()
            .into_owned();
        let mut symbolizer = Symbolizer::new();
        let ip = getpid_address();
        let direct = symbolizer.resolve(&maps, ip).unwrap();
        let via_link = symbolizer
            .resolve(std::slice::from_ref(&linked), ip)
            .unwrap();
        assert_eq!(direct.symbol, via_link.symbol);
        assert!(direct.symbol.is_some());
        assert_eq!(symbolizer.files.len(), 1);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn device_node_and_directory_are_not_opened() {
        assert_eq!(resolve_in_file("/dev/zero", 0x10).unwrap().symbol, None);
        assert_eq!(resolve_in_file("/tmp", 0x10).unwrap().symbol, None);
        assert_eq!(
            resolve_in_file("/nonexistent/libfoo.so", 0x10)
                .unwrap()
                .library,
            "libfoo.so"
        );
    }

    /// `n` addresses spread over the file-backed text mappings of `maps`, `stride` apart.
    fn spread_ips(maps: &[MappedFile], n: u64, stride: u64) -> Vec<u64> {
        let texts: Vec<&MappedFile> = maps
            .iter()
            .filter(|m| m.executable && m.path.starts_with('/'))
            .collect();
        (0..n)
            .map(|i| {
                let m = texts[(i as usize) % texts.len()];
                m.start + i.wrapping_mul(stride) % (m.end - m.start)
            })
            .collect()
    }

    #[test]
    fn wanted_symbols_resolve_as_the_full_table_does() {
        let maps = own_maps();
        let ips = spread_ips(&maps, 20_000, 7919 * 13);
        let mut full = Symbolizer::new();
        let mut wanting = Symbolizer::new();
        wanting.want(&maps, ips.iter().copied());
        let mut named = 0;
        for &ip in &ips {
            let (a, b) = (full.resolve(&maps, ip), wanting.resolve(&maps, ip));
            assert_eq!(a, b, "ip {ip:#x}");
            named += usize::from(a.and_then(|r| r.symbol).is_some());
        }
        assert!(named > 1000, "{named} of {} named", ips.len());
        let kept: usize = wanting.files.iter().map(|f| f.syms.len()).sum();
        let all: usize = full.files.iter().map(|f| f.syms.len()).sum();
        assert!(kept < all, "{kept} symbols kept of {all}");
    }

    #[test]
    fn ten_thousand_ips_resolve_the_same_from_the_cache() {
        let maps = own_maps();
        let ips = spread_ips(&maps, 10_000, 7919 * 16);
        let mut symbolizer = Symbolizer::new();
        let first: Vec<Option<Resolved>> = ips
            .iter()
            .map(|&ip| symbolizer.resolve(&maps, ip))
            .collect();
        let files = symbolizer.files.len();
        let again: Vec<Option<Resolved>> = ips
            .iter()
            .map(|&ip| symbolizer.resolve(&maps, ip))
            .collect();
        assert_eq!(first, again);
        assert_eq!(symbolizer.files.len(), files, "no file parsed twice");
        let named = first
            .iter()
            .flatten()
            .filter(|r| r.symbol.is_some())
            .count();
        assert!(named > 0, "none of 10,000 addresses in our own code named");
    }

    /// A ~150 MB Rust + C++ library, if a rustup toolchain is installed.
    fn rustc_driver_library() -> Option<String> {
        let home = std::env::var("HOME").unwrap_or_default();
        let toolchains = std::fs::read_dir(format!("{home}/.rustup/toolchains"));
        let path = toolchains.into_iter().flatten().flatten().find_map(|t| {
            let dir = std::fs::read_dir(t.path().join("lib")).ok()?;
            dir.flatten().map(|e| e.path()).find(|p| {
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                name.starts_with("librustc_driver-") && name.ends_with(".so")
            })
        })?;
        Some(path.to_string_lossy().into_owned())
    }

    #[test]
    fn large_library_loads_once() {
        // The toolchain that builds these tests has one (~150 MB of Rust and C++); another
        // machine may not.
        let Some(path) = rustc_driver_library() else {
            crate::test_skip::skipped("skipped: no librustc_driver in a rustup toolchain");
            return;
        };
        let mut symbolizer = Symbolizer::new();
        let map = MappedFile {
            start: 0x1000_0000,
            end: 0x9000_0000,
            offset: 0,
            path,
            executable: true,
            dev: 0,
            inode: 0,
        };
        let maps = std::slice::from_ref(&map);
        symbolizer.resolve(maps, 0x1000_0000);
        let text = symbolizer.files[0]
            .segments
            .iter()
            .find(|s| s.executable)
            .copied()
            .unwrap();
        let named = (0..10_000u64)
            .filter(|i| {
                let ip = map.start + text.offset + (i * 4099) % text.filesz;
                symbolizer
                    .resolve(maps, ip)
                    .is_some_and(|r| r.symbol.is_some())
            })
            .count();
        assert!(named > 0, "none of 10,000 addresses in its text named");
        assert_eq!(symbolizer.files.len(), 1);
    }

    /// Runs a build tool, failing the test with its output if it fails.
    fn tool(program: &str, args: &[&std::ffi::OsStr]) {
        let out = std::process::Command::new(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{program} is needed by this test: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn functions_only_in_the_mini_debuginfo_are_named() {
        // A stripped library whose internal function is named only in `.gnu_debugdata`, made
        // as Fedora's build tools make MiniDebugInfo (an xz-compressed ELF with `.symtab`).
        let dir = std::env::temp_dir().join(format!("mlprof-minidebug-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = |name: &str| dir.join(name);
        std::fs::write(
            path("lib.c"),
            "__attribute__((noinline)) static int spin_inside(int n) {\n\
             volatile int s = 0; for (int i = 0; i < n; i++) s += i; return s; }\n\
             int exported(int n) { return spin_inside(n) + 1; }\n",
        )
        .unwrap();
        let os = |p: &std::path::PathBuf| p.clone().into_os_string();
        let (full, mini, stripped, bare) = (
            path("full.so"),
            path("mini"),
            path("stripped.so"),
            path("bare.so"),
        );
        tool(
            "cc",
            &[
                "-shared".as_ref(),
                "-fPIC".as_ref(),
                "-O1".as_ref(),
                "-o".as_ref(),
                &os(&full),
                &os(&path("lib.c")),
            ],
        );
        tool(
            "objcopy",
            &["--only-keep-debug".as_ref(), &os(&full), &os(&mini)],
        );
        tool("xz", &["-f".as_ref(), &os(&mini)]);
        tool(
            "strip",
            &[
                "--strip-all".as_ref(),
                "-o".as_ref(),
                &os(&bare),
                &os(&full),
            ],
        );
        let section = format!(".gnu_debugdata={}", path("mini.xz").display());
        tool(
            "objcopy",
            &[
                "--add-section".as_ref(),
                section.as_ref(),
                &os(&bare),
                &os(&stripped),
            ],
        );
        let nm = std::process::Command::new("nm")
            .arg(&full)
            .output()
            .unwrap();
        let nm = String::from_utf8_lossy(&nm.stdout);
        let vaddr = nm
            .lines()
            .find(|l| l.ends_with(" spin_inside"))
            .and_then(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok())
            .expect("spin_inside in the full library's symbols");
        let named = |file: &std::path::PathBuf, wanted: Option<&[u64]>| {
            let mut symbols = FileSymbols::load(File::open(file).unwrap(), wanted).unwrap();
            symbols.lookup(vaddr + 4).map(|i| symbols.demangled_name(i))
        };
        assert_eq!(named(&stripped, None).as_deref(), Some("spin_inside"));
        // Through the wanted-offsets path too (what a run uses): text offset = vaddr here.
        let wanted = [vaddr + 4];
        assert_eq!(
            named(&stripped, Some(&wanted)).as_deref(),
            Some("spin_inside")
        );
        // Without the section the internal function is not named (so the names above came
        // from `.gnu_debugdata`).
        assert_ne!(named(&bare, None).as_deref(), Some("spin_inside"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
