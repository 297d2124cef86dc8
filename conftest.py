"""The fixtures of every test folder (`cdf_platform_tests`, `bench/tests`) come from the test
kit's plugin, registered once here at the repository's root."""

pytest_plugins = ["cdf_platform_testkit.fixtures"]
