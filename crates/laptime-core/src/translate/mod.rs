//! Translation between dialects through one dialect-free hub: a client speaking one dialect
//! reaches a channel speaking another. Each dialect has a decoder and an encoder on each side,
//! so a new dialect is two adapters, not one per pair. Same-dialect traffic never comes here:
//! its bytes are relayed untouched.
//!
//! - [`request`]: the hub model of a request, and each dialect's request decoder and encoder;
//!   a field the chosen upstream cannot carry is an error naming it, never dropped.
//! - [`stream`]: the hub model of a stream of output events, each dialect's upstream decoder
//!   (SSE events and whole bodies) and client encoder, and error translation.
//!
//! Written by hand: the hub is the product's core, and no crate translates these four dialects
//! with the event order and usage accounting the official SDKs expect.

pub mod request;
pub mod stream;
