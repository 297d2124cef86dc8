"""Between read and write: conforming transforms, expectations' judging, the quality gate."""
