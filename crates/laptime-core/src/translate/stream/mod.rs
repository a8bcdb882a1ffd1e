//! The hub model of a stream of output events, each dialect's decoder and encoder.
