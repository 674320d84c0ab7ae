__version__ = "0.0.0+inkling.standin"
cuda = "13.0"
