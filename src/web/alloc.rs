//! # The allocator
//!
//! The browser package's global allocator: power-of-two size classes, each block aligned to its
//! own size, one free list per class, memory taken from `memory.grow` and never given back. A
//! page holds a few small records, strings and closures, so this costs under a kilobyte of wasm
//! where the default (dlmalloc) costs eight, at the price of up to half a block of slack per
//! allocation.
//!
//! Only the npm package uses it (`scripts/build-pkg.sh` turns on the cargo feature
//! `small-alloc`): there the package is the whole program, while a Rust program that depends on
//! this crate keeps its own allocator. wasm32 without the `atomics` feature has one thread, so the state needs no lock;
//! with it the default allocator stays.

use ::core::alloc::{GlobalAlloc, Layout};
use ::core::cell::UnsafeCell;

/// The smallest block, so that every block is 16-aligned.
const MIN_CLASS: u32 = 4;
/// Classes up to 2^31 bytes, all of wasm32's memory.
const CLASSES: usize = 32;
const PAGE: usize = 65536;

pub(crate) struct Allocator(UnsafeCell<State>);

struct State {
    /// Free blocks of size 2^class: each holds the address of the next one (0 ends the list).
    free: [usize; CLASSES],
    /// Untouched memory taken from `memory.grow`: `next..end`.
    next: usize,
    end: usize,
}

// SAFETY: used only where wasm has a single thread (no `atomics`), see `mod.rs`.
unsafe impl Sync for Allocator {}

impl Allocator {
    pub(crate) const fn new() -> Allocator {
        Allocator(UnsafeCell::new(State {
            free: [0; CLASSES],
            next: 0,
            end: 0,
        }))
    }
}

/// The class of a layout: the smallest power of two that holds its size and alignment.
fn class(layout: Layout) -> usize {
    let size = layout.size().max(layout.align()).max(1 << MIN_CLASS);
    size.next_power_of_two().trailing_zeros() as usize
}

impl State {
    /// A block of size 2^class, aligned to its size; 0 when memory is exhausted.
    unsafe fn take(&mut self, class: usize) -> usize {
        if class >= CLASSES {
            return 0;
        }
        let head = self.free[class];
        if head != 0 {
            self.free[class] = *(head as *const usize);
            return head;
        }
        let size = 1usize << class;
        let start = self.next.wrapping_add(size - 1) & !(size - 1);
        if start < self.next || start.checked_add(size).map_or(true, |e| e > self.end) {
            // Fresh pages, following on from the ones already taken when nothing else grew
            // memory in between (otherwise the old remainder is given to the free lists).
            let pages = size.div_ceil(PAGE) + 1;
            let base = core::arch::wasm32::memory_grow::<0>(pages);
            if base == usize::MAX {
                return 0;
            }
            let base = base * PAGE;
            if base != self.end {
                self.spill(self.end);
                self.next = base;
            }
            // At most 4 GiB of memory: saturate (losing the very last byte) rather than wrap to 0.
            self.end = base.saturating_add(pages * PAGE);
            return self.take(class);
        }
        // The gap before the aligned start goes to the free lists, in aligned pieces.
        self.spill(start);
        self.next = start + size;
        start
    }

    /// Gives `next..to` to the free lists as the largest aligned blocks that fit.
    unsafe fn spill(&mut self, to: usize) {
        while self.next < to {
            let piece = self.next & self.next.wrapping_neg();
            let mut class = piece.trailing_zeros() as usize;
            while 1usize << class > to - self.next {
                class -= 1;
            }
            self.give(self.next, class);
            self.next += 1 << class;
        }
    }

    unsafe fn give(&mut self, block: usize, class: usize) {
        *(block as *mut usize) = self.free[class];
        self.free[class] = block;
    }
}

unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        (*self.0.get()).take(class(layout)) as *mut u8
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        (*self.0.get()).give(ptr as usize, class(layout));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = Layout::from_size_align_unchecked(new_size, layout.align());
        if class(new) == class(layout) {
            return ptr;
        }
        let to = self.alloc(new);
        if !to.is_null() {
            core::ptr::copy_nonoverlapping(ptr, to, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        to
    }
}
