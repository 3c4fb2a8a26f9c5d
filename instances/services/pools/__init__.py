"""instances/services/pools/: the writers of pools. lifecycle creates, changes and deletes a
pool (through the project's approval policy); checks holds its sizes, mix and launch order;
schedules its scheduled actions; plan what one autoscaler pass decides (pure); autoscaler the
beat pass itself. instances.services re-exports their public functions."""
