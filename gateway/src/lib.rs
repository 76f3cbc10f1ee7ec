//! The geofaas gateway node.
