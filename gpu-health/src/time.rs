//! Wall-clock times as Kubernetes writes them: RFC 3339 in UTC, whole seconds.

use std::time::SystemTime;

use jiff::Timestamp;

/// `2024-05-01T12:00:00Z`.
pub fn format(t: SystemTime) -> String {
    match Timestamp::try_from(t) {
        Ok(ts) => match Timestamp::from_second(ts.as_second()) {
            Ok(whole) => whole.to_string(),
            Err(_) => ts.to_string(),
        },
        Err(_) => "1970-01-01T00:00:00Z".to_string(),
    }
}

/// `t` without its fraction of a second, as [`format`] writes it: a time kept in
/// memory then equals the same time read back from the node.
pub fn whole_seconds(t: SystemTime) -> SystemTime {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(d.as_secs()),
        Err(_) => t,
    }
}

/// Parses an RFC 3339 time; `None` when it is not one.
pub fn parse(text: &str) -> Option<SystemTime> {
    text.parse::<Timestamp>().ok().map(SystemTime::from)
}

/// Serde adapter for `SystemTime` fields written as RFC 3339 strings.
pub mod rfc3339 {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let text = String::deserialize(d)?;
        super::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not an RFC 3339 time")))
    }
}

/// Serde adapter for `Option<SystemTime>` fields written as RFC 3339 strings.
pub mod rfc3339_opt {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&super::format(*t)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SystemTime>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(text) => super::parse(&text)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not an RFC 3339 time"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn round_trips_whole_seconds() {
        let t = UNIX_EPOCH + Duration::from_millis(1_714_564_800_750);
        assert_eq!(format(t), "2024-05-01T12:00:00Z");
        assert_eq!(parse("2024-05-01T12:00:00Z"), Some(UNIX_EPOCH + Duration::from_secs(1_714_564_800)));
        assert_eq!(parse("yesterday"), None);
        assert_eq!(Some(whole_seconds(t)), parse(&format(t)));
    }
}
