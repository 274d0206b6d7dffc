//! The S3 client of Spillway: SigV4 signing, S3 actions, HTTP/1.1 framing and the streaming
//! multipart uploader.
//!
//! Nothing is implemented here yet: this crate is reserved in the workspace layout and is
//! built by the S3 client issue. It deliberately exports nothing, so that nothing can depend
//! on behaviour that does not exist.
