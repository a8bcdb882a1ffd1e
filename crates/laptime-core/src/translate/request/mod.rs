//! The hub model of a request and each dialect's request decoder and encoder.
