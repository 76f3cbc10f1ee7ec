//! The outcome of one query before it is encoded: response code, records and ECS scope.

use hickory_server::proto::op::ResponseCode;
use hickory_server::proto::rr::Record;

/// What to send back.
#[derive(Debug)]
pub(super) struct Answer<'a> {
    /// Response code.
    pub rcode: ResponseCode,
    /// The answer record, if any.
    pub answer: Option<&'a Record>,
    /// The zone's SOA for the authority section of negative answers.
    pub soa: Option<&'a Record>,
    /// ECS scope prefix to echo (0: valid for every client address).
    pub scope: u8,
}

impl<'a> Answer<'a> {
    /// An error with no records.
    pub fn error(rcode: ResponseCode) -> Self {
        Self {
            rcode,
            answer: None,
            soa: None,
            scope: 0,
        }
    }

    /// NXDOMAIN (or another negative code) with the SOA for negative caching.
    pub fn negative(rcode: ResponseCode, soa: &'a Record) -> Self {
        Self {
            rcode,
            answer: None,
            soa: Some(soa),
            scope: 0,
        }
    }

    /// NOERROR with `record`, or NOERROR/no data (SOA in the authority section) without one.
    pub fn records(record: Option<&'a Record>, soa: &'a Record, scope: u8) -> Self {
        Self {
            rcode: ResponseCode::NoError,
            answer: record,
            soa: if record.is_none() { Some(soa) } else { None },
            scope,
        }
    }
}
