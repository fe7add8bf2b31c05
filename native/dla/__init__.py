"""The emulated DLA device (constraint checks + DLA numerics). Not built yet."""
