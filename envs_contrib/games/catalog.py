"""The games: id -> ``"module:Class"``, listed without importing them."""

GAMES = {
    "games/wordle": "skygym_contrib.games.wordle:WordleEnv",
    "games/tictactoe": "skygym_contrib.games.tictactoe:TicTacToeEnv",
    "games/tictactoe_random": "skygym_contrib.games.tictactoe:RandomTicTacToeEnv",
    "games/2048": "skygym_contrib.games.game_2048:Game2048Env",
    "games/blackjack": "skygym_contrib.games.blackjack:BlackjackEnv",
    "games/twenty_questions": "skygym_contrib.games.twenty_questions:TwentyQuestionsEnv",
    "games/hangman": "skygym_contrib.games.hangman:HangmanEnv",
    "games/mastermind": "skygym_contrib.games.mastermind:MastermindEnv",
    "games/nim": "skygym_contrib.games.nim:NimEnv",
    "games/guess_number": "skygym_contrib.games.guess_number:GuessNumberEnv",
    "games/lights_out": "skygym_contrib.games.lights_out:LightsOutEnv",
    "games/sokoban": "skygym_contrib.games.sokoban:SokobanEnv",
}
