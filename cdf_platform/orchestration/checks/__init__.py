"""Asset checks: silver's lag, replay window and foreign writes; one check per expectation."""
