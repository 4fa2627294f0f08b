//! The conformance suite on the simulated H200 and MI300X.

mod h200 {
    vitamin_tests::conformance_tests!(Some(vitamin_hal::sim::SimBackend::preset("h200").unwrap()));
}

mod mi300x {
    vitamin_tests::conformance_tests!(Some(vitamin_hal::sim::SimBackend::preset("mi300x").unwrap()));
}

mod small {
    vitamin_tests::conformance_tests!(Some(
        vitamin_hal::sim::SimBackend::new(vitamin_hal::sim::SimConfig::uniform(40, 8)).expect("valid")
    ));
}
