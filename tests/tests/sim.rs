//! The conformance suite on the simulated H200 and MI300X.

mod h200 {
    vitamin_tests::conformance_tests!(Some(vitamin_hal::sim::SimBackend::h200()));
}

mod mi300x {
    vitamin_tests::conformance_tests!(Some(vitamin_hal::sim::SimBackend::mi300x()));
}

mod small {
    vitamin_tests::conformance_tests!(Some(
        vitamin_hal::sim::SimBackend::new(vitamin_hal::sim::SimConfig::uniform(vitamin_hal::Vendor::Nvidia, 40, 8))
            .expect("valid")
    ));
}
