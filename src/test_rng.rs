//! The one pseudo-random generator of the fuzz and property tests: fixed seeds, so every case
//! is reproducible. No crate needed.

/// xorshift64: small, fast, reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // Never zero (a zero state stays zero); mix the seed a little.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }

    /// A payload word biased towards the values that break arithmetic.
    pub fn word(&mut self) -> u64 {
        match self.below(10) {
            0 => 0,
            1 => u64::MAX,
            2 => 0xffff_ffff,
            3 => 1 << 63,
            4 => self.below(300),
            5 => self.below(300) << 32 | self.below(300),
            6 => i64::MAX as u64 + self.below(3),
            _ => self.next(),
        }
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}
