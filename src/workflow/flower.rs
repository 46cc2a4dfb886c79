//! flower's default pipeline. TODO
