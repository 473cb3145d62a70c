//! libLLVMOffload.so.22.1 (work in progress).
#![allow(non_snake_case)]
