//! A resource simulator standing in for hardware: a 4-joint arm (turret, shoulder, elbow1,
//! elbow2) whose joints follow their position setpoints with a first-order response inside
//! their limits, and a differential drive base whose wheels follow velocity setpoints and whose
//! pose is integrated from them.

use std::collections::BTreeMap;

/// One arm joint: position limits and current position.
#[derive(Clone, Debug)]
pub struct Joint {
    pub min: f64,
    pub max: f64,
    pub position: f64,
}

/// The simulated robot.
#[derive(Clone, Debug)]
pub struct Robot {
    pub joints: BTreeMap<String, Joint>,
    /// Wheel velocities (m/s), left and right.
    pub wheels: [f64; 2],
    /// Pose: x, y (m), theta (rad).
    pub pose: [f64; 3],
    /// First-order time constant of joints and wheels (s).
    pub tau: f64,
    pub wheel_base: f64,
    pub max_wheel_speed: f64,
}

impl Default for Robot {
    fn default() -> Self {
        let joint = |lim: f64| Joint {
            min: -lim,
            max: lim,
            position: 0.0,
        };
        Robot {
            joints: [
                ("turret", joint(std::f64::consts::PI)),
                ("shoulder", joint(std::f64::consts::FRAC_PI_2)),
                ("elbow1", joint(2.5)),
                ("elbow2", joint(2.5)),
            ]
            .into_iter()
            .map(|(n, j)| (n.to_owned(), j))
            .collect(),
            wheels: [0.0; 2],
            pose: [0.0; 3],
            tau: 0.2,
            wheel_base: 0.5,
            max_wheel_speed: 1.0,
        }
    }
}

/// The drive base's wheels, in the order of `Robot::wheels`.
const WHEELS: [&str; 2] = ["left", "right"];

impl Joint {
    /// Where a setpoint sends the joint, within its limits; where it is without a finite one.
    fn target(&self, setpoint: Option<&f64>) -> f64 {
        setpoint
            .copied()
            .filter(|t| t.is_finite())
            .unwrap_or(self.position)
            .clamp(self.min, self.max)
    }
}

impl Robot {
    /// Advances `dt` seconds towards the arm's position setpoints and the wheels' velocity
    /// setpoints (missing setpoints: hold position / stop).
    pub fn step(&mut self, dt: f64, arm: &BTreeMap<String, f64>, drive: &BTreeMap<String, f64>) {
        let alpha = 1.0 - (-dt / self.tau).exp();
        for (name, joint) in &mut self.joints {
            joint.position += (joint.target(arm.get(name)) - joint.position) * alpha;
        }
        for (i, name) in WHEELS.iter().enumerate() {
            self.wheels[i] += (self.wheel_target(drive.get(*name)) - self.wheels[i]) * alpha;
        }
        let v = (self.wheels[0] + self.wheels[1]) / 2.0;
        let w = (self.wheels[1] - self.wheels[0]) / self.wheel_base;
        self.pose[0] += v * self.pose[2].cos() * dt;
        self.pose[1] += v * self.pose[2].sin() * dt;
        // Heading kept in (-pi, pi].
        let theta = (self.pose[2] + w * dt).rem_euclid(std::f64::consts::TAU);
        self.pose[2] = if theta > std::f64::consts::PI {
            theta - std::f64::consts::TAU
        } else {
            theta
        };
    }

    /// Whether stepping towards these setpoints would change nothing any more: every joint
    /// within a micro-unit of its target, the wheels stopped and told to stay stopped.
    pub fn at_rest(&self, arm: &BTreeMap<String, f64>, drive: &BTreeMap<String, f64>) -> bool {
        let joints = self
            .joints
            .iter()
            .all(|(name, joint)| (joint.target(arm.get(name)) - joint.position).abs() < 1e-6);
        let wheels = WHEELS.iter().enumerate().all(|(i, name)| {
            self.wheels[i].abs() < 1e-9 && self.wheel_target(drive.get(*name)) == 0.0
        });
        joints && wheels
    }

    /// The wheel speed a setpoint asks for, within the wheels' limit; stop without a finite one.
    fn wheel_target(&self, setpoint: Option<&f64>) -> f64 {
        setpoint
            .copied()
            .filter(|t| t.is_finite())
            .unwrap_or(0.0)
            .clamp(-self.max_wheel_speed, self.max_wheel_speed)
    }

    pub fn arm_state(&self) -> BTreeMap<String, f64> {
        self.joints
            .iter()
            .map(|(n, j)| (n.clone(), j.position))
            .collect()
    }

    pub fn drive_state(&self) -> BTreeMap<String, f64> {
        [
            ("left", self.wheels[0]),
            ("right", self.wheels[1]),
            ("x", self.pose[0]),
            ("y", self.pose[1]),
            ("theta", self.pose[2]),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joints_follow_within_limits_and_the_base_drives() {
        let mut r = Robot::default();
        let arm: BTreeMap<String, f64> =
            [("shoulder".to_owned(), 5.0), ("turret".to_owned(), 1.0)].into();
        let drive: BTreeMap<String, f64> =
            [("left".to_owned(), 0.5), ("right".to_owned(), 0.5)].into();
        for _ in 0..500 {
            r.step(0.01, &arm, &drive);
        }
        assert!(
            (r.joints["shoulder"].position - 1.57).abs() < 1e-3,
            "clamped to its limit"
        );
        assert!((r.joints["turret"].position - 1.0).abs() < 1e-3);
        assert_eq!(r.joints["elbow1"].position, 0.0, "no setpoint: holds");
        assert!(
            r.pose[0] > 2.0 && r.pose[1].abs() < 1e-9,
            "drove straight ahead"
        );
    }
}
