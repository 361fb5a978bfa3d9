"""Every system, by the name its runs write into their checkpoints (`systems.common.registry.SystemEntry`).
`launch.evaluate` restores any run through it and `launch.sweep` takes its launchers from it. Listing it imports
no JAX: each entry imports its system only when it restores a run."""

from systems.anakin.entry import ENTRY as ANAKIN
from systems.ba3c.entry import ENTRY as BA3C
from systems.gala.entry import ENTRY as GALA
from systems.hts.entry import ENTRY as HTS
from systems.pal.entry import ENTRY as PAL
from systems.spreeze.entry import ENTRY as SPREEZE
from systems.sync.entry import ENTRY as SYNC

ENTRIES = {entry.name: entry for entry in (HTS, SYNC, BA3C, GALA, PAL, SPREEZE, ANAKIN)}
LAUNCHERS = tuple(entry.launcher for entry in ENTRIES.values())
