//! A value type with a bit of everything serde offers (nested enum, vector, option), shared by
//! the tests that decode slots without their Rust type.

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq, Clone)]
pub enum Mode {
    Idle,
    Moving { speed: f64 },
}

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq, Clone)]
pub struct Status {
    pub name: String,
    pub joints: Vec<f32>,
    pub mode: Mode,
    pub battery: Option<u8>,
}

impl Status {
    /// The arm moving, joints and battery set: what the tests publish.
    pub fn arm() -> Status {
        Status {
            name: "arm".into(),
            joints: vec![0.5, -1.0],
            mode: Mode::Moving { speed: 0.25 },
            battery: Some(87),
        }
    }
}
