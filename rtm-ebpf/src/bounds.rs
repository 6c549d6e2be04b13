//! Array indexes the verifier of every supported kernel can check.
//!
//! LLVM drops a mask it can prove redundant after a bounds check and folds `i - 1` into
//! the load's offset, leaving the verifier a register whose bounds live on another
//! register (`depth - 1 < 32` checked, `depth * 64 - 64` used). Linux 6.8+ carries such
//! bounds across the two registers; 6.1 does not and refuses the program ("math between
//! map_value pointer and register with unbounded min value"). Passing the index through
//! an opaque stack copy before masking it keeps the mask in the code, so the index is
//! in bounds by construction, whatever the compiler knows.

/// `i & mask`, with the mask kept in the compiled code.
#[inline(always)]
pub fn masked(i: usize, mask: usize) -> usize {
    // SAFETY: reads a local.
    (unsafe { core::ptr::read_volatile(&i) }) & mask
}

/// Copies a `T` as 64-bit words. A plain copy of a large value becomes a call to a
/// byte-by-byte `memcpy` the verifier walks once per byte on every path that reaches it
/// (on 6.1 that took `func_return` past the million-instruction limit), and that runs a
/// loop per byte at every hit.
///
/// # Safety
/// Both pointers are valid and aligned for a `T`, and do not overlap.
#[inline(always)]
pub unsafe fn copy_words<T>(dst: *mut T, src: *const T) {
    const { assert!(size_of::<T>().is_multiple_of(8)) };
    let (d, s) = (dst.cast::<u64>(), src.cast::<u64>());
    for i in 0..size_of::<T>() / 8 {
        // SAFETY: in bounds of both values (see above); volatile keeps the compiler from
        // turning the loop back into a call to memcpy.
        unsafe { d.add(i).write_volatile(s.add(i).read_volatile()) };
    }
}
