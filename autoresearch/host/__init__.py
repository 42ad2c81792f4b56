"""One process that hosts many studies: ``autoresearch host`` (a folder of study specs, a
thread per study driving its own loop and journal, one shared waiter for all their jobs)."""
