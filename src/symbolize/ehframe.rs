//! Where functions start in a library that names none there (a stripped system library's
//! internal functions: glibc's `memmove` variants, libm's `pow` kernels): the binary search
//! table of `.eh_frame_hdr`, which every GNU-built ELF carries for unwinding. Addresses of one
//! unnamed function are then one row (`libm.so.6+0x6f400`), not one row per sampled address.
//! Everything read is untrusted: counts and offsets are checked against the section's size.

/// `DW_EH_PE_datarel | DW_EH_PE_sdata4`: the table encoding GNU toolchains write (entries of
/// two signed 32-bit offsets from the section's start).
const DATAREL_SDATA4: u8 = 0x3b;
/// `DW_EH_PE_udata4`, `DW_EH_PE_sdata4` and `DW_EH_PE_pcrel | DW_EH_PE_sdata4`: 4-byte fields.
const FOUR_BYTES: [u8; 3] = [0x03, 0x0b, 0x1b];

/// Function start addresses (ELF virtual addresses, sorted) from an `.eh_frame_hdr` section's
/// bytes and its address; empty when the section is not in the usual form.
pub fn function_starts(section: &[u8], section_vaddr: u64) -> Vec<u64> {
    let [version, ptr_enc, count_enc, table_enc, ..] = *section else {
        return Vec::new();
    };
    if version != 1
        || table_enc != DATAREL_SDATA4
        || !FOUR_BYTES.contains(&ptr_enc)
        || !FOUR_BYTES.contains(&count_enc)
    {
        return Vec::new();
    }
    let word = |at: usize| -> Option<i32> {
        Some(i32::from_le_bytes(
            section.get(at..at + 4)?.try_into().ok()?,
        ))
    };
    let Some(count) = word(8).and_then(|c| usize::try_from(c).ok()) else {
        return Vec::new();
    };
    let table = 12;
    if count > (section.len() - table) / 8 {
        return Vec::new();
    }
    let mut starts: Vec<u64> = (0..count)
        .filter_map(|i| word(table + 8 * i))
        .map(|rel| section_vaddr.wrapping_add_signed(i64::from(rel)))
        .collect();
    starts.sort_unstable();
    starts.dedup();
    starts
}

/// The start of the function holding `vaddr`: the last start at or before it.
pub fn function_of(starts: &[u64], vaddr: u64) -> Option<u64> {
    let pos = starts.partition_point(|&s| s <= vaddr);
    pos.checked_sub(1).map(|i| starts[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(entries: &[(i32, i32)], count: i32) -> Vec<u8> {
        let mut s = vec![1, 0x1b, 0x03, DATAREL_SDATA4];
        s.extend(0i32.to_le_bytes());
        s.extend(count.to_le_bytes());
        for &(loc, fde) in entries {
            s.extend(loc.to_le_bytes());
            s.extend(fde.to_le_bytes());
        }
        s
    }

    #[test]
    fn the_search_table_gives_function_starts() {
        let s = section(&[(-0x2000, 0x40), (-0x1000, 0x80), (0x300, 0xc0)], 3);
        let starts = function_starts(&s, 0x10_0000);
        assert_eq!(starts, [0xf_e000, 0xf_f000, 0x10_0300]);
        assert_eq!(function_of(&starts, 0xf_f123), Some(0xf_f000));
        assert_eq!(function_of(&starts, 0xf_e000), Some(0xf_e000));
        assert_eq!(function_of(&starts, 0x1000), None);
    }

    #[test]
    fn bad_sections_give_nothing() {
        // A count beyond the section, a negative count, another encoding, too short.
        assert!(function_starts(&section(&[(1, 2)], 2), 0).is_empty());
        assert!(function_starts(&section(&[(1, 2)], -1), 0).is_empty());
        let mut other = section(&[(1, 2)], 1);
        other[3] = 0x1b;
        assert!(function_starts(&other, 0).is_empty());
        assert!(function_starts(&[1, 0x1b], 0).is_empty());
    }
}
